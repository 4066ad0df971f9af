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
#   2. bench/gpu_step.py at the SmolLM2-135M shape, bf16, 32 rows, with the mode (a run's
#      default), its sampler and micro-batches the defaults on CUDA
#   3. bench/gpu_step.py at a Qwen2.5-7B shape, the same
#   4. the 135M shape again with the KV-cache sampler, and again without the mode
#   5. the not-slow tests on CUDA (what time is left): the CUDA cases of the static-cache
#      sampler, the micro-batch budget and tests/runtime, then tests/callbacks, tests/language_models and
#      tests/training (the device `auto` picks the GPU), all in the mode (tests/conftest.py)
# Writes to FOLDER ($OUT, else /tmp/gpu_out): reproducibility.json, smollm2_135m_bf16.json,
# 7b_bf16.json, smollm2_135m_bf16_kv_cache.json, smollm2_135m_bf16_no_mode.json,
# pytest_cuda.log, summary.json (7 files with the log); prints the summary last.
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
timeout "$(left 170)" python3 bench/gpu_reproducibility.py --device cuda \
    --shape smollm2-135m --assets .gpu_assets/smollm2-135m --work_dir /tmp/gpu_reproducibility \
    --control --out "$OUT/reproducibility.json"
echo "reproducibility rc=$?"

# The sampler and the step, 32 rows each (8 prompts x 4 samples), the sampler a run's
# default on CUDA (static_cache: captured decode steps) and micro-batches sized from free
# memory (auto), in the mode.
stage "2. gpu_step at the 135M shape, bf16"
timeout "$(left 60)" python3 bench/gpu_step.py --shape smollm2-135m --dtype bfloat16 \
    --save_dtype float32 --prompts 8 --samples 4 --prompt_tokens 96 --new_tokens 128 \
    --reproducible --model_dir /tmp/smollm2_random --out "$OUT/smollm2_135m_bf16.json"
echo "gpu_step 135M rc=$?"

# The 7B-shaped folder is about 15 GB: /dev/shm when it has room, /tmp otherwise.
SEVEN=/dev/shm/q7b_random
[ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt 20 ] || SEVEN=/tmp/q7b_random
stage "3. gpu_step at the 7B shape, bf16"
timeout "$(left 260)" python3 bench/gpu_step.py --shape 7b --dtype bfloat16 --prompts 8 \
    --samples 4 --prompt_tokens 128 --new_tokens 128 --score_rows 8 \
    --peaks_from "$OUT/smollm2_135m_bf16.json" --profile_step \
    --reproducible --model_dir "$SEVEN" --out "$OUT/7b_bf16.json"
echo "gpu_step 7B rc=$?"
rm -rf "$SEVEN"

# Beside stage 2, one thing changed each: the KV-cache sampler (the loop the static one
# replaces), and the mode off (its cost). Sampling figures only matter here: no peaks.
stage "4. gpu_step at the 135M shape: the kv_cache sampler, and without the mode"
timeout "$(left 45)" python3 bench/gpu_step.py --shape smollm2-135m --dtype bfloat16 \
    --prompts 8 --samples 4 --prompt_tokens 96 --new_tokens 128 --no_peaks \
    --sampler kv_cache --reproducible --model_dir /tmp/smollm2_random \
    --out "$OUT/smollm2_135m_bf16_kv_cache.json"
echo "gpu_step 135M kv_cache rc=$?"
timeout "$(left 45)" python3 bench/gpu_step.py --shape smollm2-135m --dtype bfloat16 \
    --prompts 8 --samples 4 --prompt_tokens 96 --new_tokens 128 --no_peaks \
    --model_dir /tmp/smollm2_random --out "$OUT/smollm2_135m_bf16_no_mode.json"
echo "gpu_step 135M without the mode rc=$?"

stage "5. not-slow tests on CUDA (what time is left)"
parallel=()  # 4 at a time where the image has pytest-xdist; a file's tests on one worker
python3 -c "import xdist" 2>/dev/null && parallel=(-n 4 --dist loadfile)
{
    timeout "$(left 100)" python3 -m pytest -q -p no:cacheprovider -k cuda \
        tests/language_models/test_static_cache_sampler.py \
        tests/training/test_micro_batches.py tests/runtime
    echo "pytest static sampler, micro-batches, tests/runtime (cuda) rc=$?"
    timeout "$(left 120)" python3 -m pytest -q -m "not slow" -p no:cacheprovider \
        ${parallel[@]+"${parallel[@]}"} tests/callbacks tests/language_models tests/training
    echo "pytest callbacks, language_models, training rc=$?"
} > "$OUT/pytest_cuda.log" 2>&1
grep -E "passed|failed|error|rc=" "$OUT/pytest_cuda.log" | tail -n 8

stage summary
python3 bench/gpu_check_summary.py "$OUT"
