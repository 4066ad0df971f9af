#!/usr/bin/env bash
# Second call on the GPU machine: the same runs repeated (run-to-run spread) with
# --profile_steps, to see where a decode step's time goes. Carries .whl and .gpu_assets.
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
md5sum src/callbacks/instance/rl_training_callback.py src/language_models/instance/huggingface_lora_language_model.py
for dtype in bfloat16 float32; do
    echo; echo "=== 135M $dtype (${SECONDS}s)"
    timeout 150 python3 bench/gpu_step.py --shape smollm2-135m --dtype $dtype \
        --save_dtype float32 --prompts 8 --samples 4 --prompt_tokens 96 --new_tokens 128 \
        --model_dir /tmp/smollm2_random --profile_steps 32 \
        --profile_out "$OUT/profile_135m_$dtype.txt" --out "$OUT/smollm2_135m_${dtype}_run2.json"
done
echo; echo "=== 7B-shaped bf16 (${SECONDS}s)"
timeout 300 python3 bench/gpu_step.py --shape 7b --dtype bfloat16 --prompts 4 --samples 4 \
    --prompt_tokens 128 --new_tokens 128 --score_rows 4 --model_dir /dev/shm/q7b_random \
    --profile_steps 32 --profile_out "$OUT/profile_7b_bfloat16.txt" \
    --out "$OUT/7b_bf16_run2.json"
echo; echo "=== done (${SECONDS}s)"
