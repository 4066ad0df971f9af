"""A PEFT LoRA model whose base model holds no weights (it is on the meta device) and
whose adapter is real, in CPU memory: all a process needs that only holds, hands out and
saves the adapter while other processes sample and train (the driver of a run whose
rollouts come from a rollout pool and whose update runs in trainer workers). For a 32B
model that is its adapter (about 0.5 GB at rank 16 on every linear layer) instead of
65 GB of base weights.

The adapter starts where `get_peft_model` starts it over loaded weights, bit for bit, and
leaves torch's random generator in the same state: PEFT builds each LoRA layer's A and B
as `nn.Linear` modules (whose constructors draw their default initialisation), draws A
again (kaiming-uniform), zeroes B, casts both to the base layer's dtype and, for a bf16 or
fp16 base, back to float32. Over a meta base it would move them to the meta device, values
and all, so here PEFT builds them empty (`low_cpu_mem_usage`) and `_initialise` replays
those steps on the CPU in PEFT's order (tests/language_models/test_meta_base.py compares
the two tensor by tensor).
"""

from __future__ import annotations

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from transformers import AutoModelForCausalLM


def lora_model_on_meta_base(path: str, lora_config: LoraConfig, dtype: torch.dtype,
                            attn_implementation: str) -> PeftModel:
    """The base model of `path` without weights and `lora_config`'s adapter, initialised.
    Raises ValueError for an adapter that trains base-model tensors (a bias, an embedding)
    or needs the base weights to start (PiSSA and the like)."""
    if lora_config.init_lora_weights is not True:
        raise ValueError(f"init_lora_weights={lora_config.init_lora_weights!r} starts the "
                         "adapter from the base weights, which a meta base does not hold")
    # transformers' own meta loading: the modules, dtypes and generation config that
    # from_pretrained gives, no tensor read
    base = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation=attn_implementation, device_map="meta")
    model = get_peft_model(base, lora_config, low_cpu_mem_usage=True)
    for module in model.modules():
        if isinstance(module, LoraLayer):
            _initialise(module)
    empty = [name for name, parameter in model.named_parameters()
             if parameter.requires_grad and parameter.is_meta]
    if empty:
        raise ValueError(f"the adapter trains {empty[:3]}, which have no values without the "
                         "base weights: only LoRA on linear layers, with bias: none, can be "
                         "built on a meta base")
    return model


@torch.no_grad()
def _initialise(layer: LoraLayer) -> None:
    """PEFT's `update_layer` from its `nn.Linear` constructors on, on the CPU."""
    base_dtype = layer.get_base_layer().weight.dtype
    for adapter in layer.lora_A:
        factors = (layer.lora_A[adapter], layer.lora_B[adapter])
        for linear in factors:
            linear.to_empty(device="cpu")
            linear.reset_parameters()  # the draws of nn.Linear's constructor
        layer.reset_lora_parameters(adapter, True)
        for linear in factors:
            for parameter in linear.parameters():
                parameter.copy_(parameter.to(base_dtype))  # PEFT's round trip
