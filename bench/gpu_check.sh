#!/usr/bin/env bash
# The prepared device check (docs/gpu.md): one call of at most 10 minutes on a lent
# H100/H200 machine, from the repository root, carrying .whl and .gpu_assets (see
# bench/gpu_setup.sh). Nothing needs model weights: the models are random, of real shapes.
#
#   set -o pipefail; bash bench/gpu_check.sh [FOLDER] 2>&1 | tee $OUT/log
#
# Stages, in order of what they settle, each bounded so that the whole ends inside LIMIT
# seconds (default 570):
#   1. reproducibility: bench/gpu_reproducibility.py on a random SmolLM2-135M-shaped model:
#      two seeded runs, a run SIGKILLed and resumed, two runs without the mode, probes
#      (float cumsum and each attention backend, with and without the mode)
#   2. the not-slow tests on CUDA: the CUDA cases of tests/runtime, then tests/callbacks,
#      tests/language_models and tests/training (the device `auto` picks the GPU), all with
#      the reproducible mode on (tests/conftest.py)
#   3. bench/gpu_step.py at the SmolLM2-135M shape, bf16, with the mode (a run's default)
#   4. bench/gpu_step.py at a Qwen2.5-7B shape, bf16, with the mode (what time is left)
# Writes to FOLDER ($OUT, else /tmp/gpu_out): reproducibility.json, pytest_cuda.log,
# smollm2_135m_bf16.json, 7b_bf16.json, summary.json; prints the summary last.
set -u
OUT=${1:-${OUT:-/tmp/gpu_out}}
# shellcheck source=bench/gpu_setup.sh
source bench/gpu_setup.sh
# the runs must find no deterministic cuBLAS layout in their environment but the one the
# mode sets (the control runs go without it)
unset CUBLAS_WORKSPACE_CONFIG
python3 -c "import src.run_experiment, pytest, hypothesis" \
    || echo "a module above is missing: add its wheel to .whl (docs/gpu.md)"

stage "1. reproducibility (two seeded runs, a kill and resume, two control runs, probes)"
timeout "$(left 200)" python3 bench/gpu_reproducibility.py --device cuda \
    --shape smollm2-135m --assets .gpu_assets/smollm2-135m --work_dir /tmp/gpu_reproducibility \
    --control --out "$OUT/reproducibility.json"
echo "reproducibility rc=$?"

stage "2. not-slow tests on CUDA"
parallel=()  # 4 at a time where the image has pytest-xdist; a file's tests on one worker
python3 -c "import xdist" 2>/dev/null && parallel=(-n 4 --dist loadfile)
{
    timeout "$(left 100)" python3 -m pytest -q -p no:cacheprovider -k cuda tests/runtime
    echo "pytest tests/runtime (cuda) rc=$?"
    timeout "$(left 120)" python3 -m pytest -q -m "not slow" -p no:cacheprovider \
        ${parallel[@]+"${parallel[@]}"} tests/callbacks tests/language_models tests/training
    echo "pytest callbacks, language_models, training rc=$?"
} > "$OUT/pytest_cuda.log" 2>&1
grep -E "passed|failed|error|rc=" "$OUT/pytest_cuda.log" | tail -n 8

stage "3. gpu_step at the 135M shape, bf16"
timeout "$(left 80)" python3 bench/gpu_step.py --shape smollm2-135m --dtype bfloat16 \
    --save_dtype float32 --prompts 8 --samples 4 --prompt_tokens 96 --new_tokens 128 \
    --reproducible --model_dir /tmp/smollm2_random --out "$OUT/smollm2_135m_bf16.json"
echo "gpu_step 135M rc=$?"

# The 7B-shaped folder is about 15 GB: /dev/shm when it has room, /tmp otherwise.
SEVEN=/dev/shm/q7b_random
[ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt 20 ] || SEVEN=/tmp/q7b_random
stage "4. gpu_step at the 7B shape, bf16"
timeout "$(left 300)" python3 bench/gpu_step.py --shape 7b --dtype bfloat16 --prompts 4 \
    --samples 4 --prompt_tokens 128 --new_tokens 128 --score_rows 4 --no_peaks \
    --reproducible --model_dir "$SEVEN" --out "$OUT/7b_bf16.json"
echo "gpu_step 7B rc=$?"

stage summary
python3 bench/gpu_check_summary.py "$OUT"
