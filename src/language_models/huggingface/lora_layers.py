"""LoRA linear layers whose adapter products run in the dtype of the layer's input.

PEFT keeps a bf16 base's adapter in float32 (right: the optimiser's master weights) and
casts every LoRA input to float32, so 6 of an adapted layer's 8 matrix products (2 forward,
4 backward) run as skinny fp32 products with conversions of the whole activation and an
fp32 scale-and-add around them. On a 2-core AMX host that was 16% of a quickstart update
in fp32 products and 19% in conversions, against 11% for the base model's bf16 products.
Here the activation stays in the base's dtype and the adapter's weights are cast to it
(r x in and out x r elements, a few KB a layer): every product runs on the bf16 units,
autograd casts the factors' gradients back to float32 as they leave the cast, and they
accumulate in the float32 `.grad` across micro-batches. The scale is folded into the cast
of B. Anything else (dropout-free or not, merged, disabled, variants such as DoRA,
per-row adapters, an fp32 input) runs PEFT's own forward.
"""

from __future__ import annotations

from typing import Any

import torch
from peft import LoraConfig
from peft.tuners.lora import Linear as LoraLinear

REDUCED_PRECISION = (torch.bfloat16, torch.float16)


class InputDtypeLoraLinear(LoraLinear):
    """PEFT's LoRA `Linear` with its adapter products in the input's reduced precision."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not self._runs_in_input_dtype(x, args, kwargs):
            return super().forward(x, *args, **kwargs)
        result = self.base_layer(x)
        for name in self.active_adapters:  # each in this layer: `_runs_in_input_dtype`
            down = self.lora_A[name].weight.to(x.dtype)
            up = (self.lora_B[name].weight * self.scaling[name]).to(x.dtype)
            adapted = self.lora_dropout[name](x)
            result = result + torch.nn.functional.linear(
                torch.nn.functional.linear(adapted, down), up)
        return result

    def _runs_in_input_dtype(self, x: torch.Tensor, args: tuple, kwargs: dict) -> bool:
        if (args or kwargs or self.disable_adapters or self.merged
                or x.dtype not in REDUCED_PRECISION):
            return False
        return all(name not in self.lora_variant and name in self.lora_A
                   and self.lora_A[name].weight.dtype != x.dtype
                   for name in self.active_adapters)


def with_input_dtype_products(config: LoraConfig) -> LoraConfig:
    """`config` with PEFT told to build its linear LoRA layers as `InputDtypeLoraLinear`."""
    config._register_custom_module({torch.nn.Linear: InputDtypeLoraLinear})
    return config
