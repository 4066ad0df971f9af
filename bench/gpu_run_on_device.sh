#!/usr/bin/env bash
# The GPU check of the in-process LoRA policy (docs/gpu.md), run on a lent GPU machine from
# the repository root with two ignored folders carried: .whl (wheels of the project's
# dependencies that the machine's image lacks; it has no network) and .gpu_assets (the
# embedded model's config and tokenizer, no weights). bench/gpu_step.py builds randomly
# initialised models of the real shapes, so nothing here needs model weights.
#
#   set -o pipefail; bash bench/gpu_run_on_device.sh 2>&1 | tee $OUT/log
#
# LIMIT (seconds, default 570) bounds the whole script so that it ends inside one device
# call; PROFILE_STEPS=32 adds torch.profiler tables of that many decode steps. Outputs go to
# $OUT (the device tool's folder; /tmp/gpu_out elsewhere): one JSON per run, the CUDA test
# log and any profiles.
set -u
PROFILE_STEPS=${PROFILE_STEPS:-0}
# shellcheck source=bench/gpu_setup.sh
source bench/gpu_setup.sh
profile() {  # profile arguments for one run, named by its label
    [ "$PROFILE_STEPS" -gt 0 ] && echo "--profile_steps $PROFILE_STEPS --profile_out $OUT/profile_$1.txt"
}

stage "import every src module"
python3 - <<'PY'
import importlib, pkgutil, src
failed = {}
for module in pkgutil.walk_packages(src.__path__, "src."):
    try:
        importlib.import_module(module.name)
    except Exception as error:  # ray and vLLM may be missing; anything else is a wheel to add
        failed[module.name] = f"{type(error).__name__}: {error}"
print("imported; failures:", failed or "none")
PY

stage "135M bf16"
# shellcheck disable=SC2046
timeout "$(left 150)" python3 bench/gpu_step.py --shape smollm2-135m --dtype bfloat16 \
    --save_dtype float32 --prompts 8 --samples 4 --prompt_tokens 96 --new_tokens 128 \
    --model_dir /tmp/smollm2_random $(profile 135m_bfloat16) --out "$OUT/smollm2_135m_bf16.json"
stage "135M fp32"
# shellcheck disable=SC2046
timeout "$(left 150)" python3 bench/gpu_step.py --shape smollm2-135m --dtype float32 \
    --prompts 8 --samples 4 --prompt_tokens 96 --new_tokens 128 \
    --model_dir /tmp/smollm2_random $(profile 135m_float32) --out "$OUT/smollm2_135m_fp32.json"

stage "tests (not slow) on CUDA: callbacks, language_models, training"
timeout "$(left 150)" python3 -m pytest -q -m "not slow" -p no:cacheprovider -n 4 \
    tests/callbacks tests/language_models tests/training > "$OUT/pytest_cuda.log" 2>&1
echo "pytest rc=$?"; tail -n 40 "$OUT/pytest_cuda.log"

# The 7B-shaped folder is about 15 GB: /dev/shm when it has room, /tmp otherwise.
SEVEN=/dev/shm/q7b_random
[ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt 20 ] || SEVEN=/tmp/q7b_random
stage "7B-shaped bf16, gradient checkpointing"
timeout "$(left 300)" python3 bench/gpu_step.py --shape 7b --dtype bfloat16 --prompts 4 \
    --samples 4 --prompt_tokens 128 --new_tokens 128 --score_rows 4 \
    --gradient_checkpointing --model_dir "$SEVEN" --out "$OUT/7b_bf16_gc.json"
stage "7B-shaped bf16, no gradient checkpointing"
# shellcheck disable=SC2046
timeout "$(left 200)" python3 bench/gpu_step.py --shape 7b --dtype bfloat16 --prompts 4 \
    --samples 4 --prompt_tokens 128 --new_tokens 128 --score_rows 4 \
    --model_dir "$SEVEN" $(profile 7b_bfloat16) --out "$OUT/7b_bf16.json"
stage "done"
