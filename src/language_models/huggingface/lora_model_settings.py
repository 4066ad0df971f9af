"""How the Hugging Face policy's weights are laid out: its LoRA adapter's shape (the
`lora_config` block), the dtype of its base weights and the device they live on."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict


class LoRASettings(BaseModel):
    """The `lora_config` block as LifelongAgentBench's configs write it (PEFT LoraConfig
    fields). The adapter starts at zero, so the policy starts as the base model."""

    model_config = ConfigDict(extra="forbid")

    r: int = 16  # the adapter's rank
    lora_alpha: int = 32  # the adapter's output is scaled by lora_alpha / r
    # `all-linear` (every linear layer but the output head) or a list of module names
    target_modules: list[str] | str = "all-linear"
    # only the cross-entropy losses (supervised stage, offline RCE warm-up) use it:
    # sampling and the RL update run without it, so that the PPO ratio is 1 on policy
    lora_dropout: float = 0.0
    bias: Literal["none", "all", "lora_only"] = "none"  # which biases train as well
    task_type: Literal["CAUSAL_LM"] = "CAUSAL_LM"


def choose_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# base: a bf16 or fp16 base's adapter products run in its dtype (huggingface/lora_layers);
# float32: PEFT's own layers, which cast every adapter input to the adapter's float32
LoRAComputeDtype = Literal["base", "float32"]

Dtype = Literal["auto", "bfloat16_where_native", "float32", "bfloat16", "float16"]


def multiplies_bfloat16_natively(device: torch.device) -> bool:
    """A GPU, or a CPU with bf16 matrix instructions (AMX tiles or AVX512-BF16): there
    bf16 matrix products run 2-8x faster than fp32 (docs/results.md, "Performance")."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and (torch.cpu._is_amx_tile_supported()
                                     or torch.cpu._is_avx512_bf16_supported())


def choose_dtype(dtype: Dtype, device: torch.device) -> torch.dtype:
    if dtype == "auto":  # exact fp32 on CPU; bf16 where the GPU makes it the norm
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype == "bfloat16_where_native":
        return torch.bfloat16 if multiplies_bfloat16_natively(device) else torch.float32
    return getattr(torch, dtype)
