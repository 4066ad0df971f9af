"""The Hugging Face + PEFT policy's internals: its in-process samplers (the `Sampler`
contract, KV-cache, static-cache, transformers' generate, fused LoRA), token draws, caches,
grouped attention, custom attention masks, token scoring and the meta-device base. Only
src/language_models/instance/huggingface_lora_language_model.py (and the trainer workers,
for the meta base) build on them."""
