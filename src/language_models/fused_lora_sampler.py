"""A copy of the base model for sampling, whose LoRA layers each run one matrix product.

With the adapter as PEFT modules, every linear layer of every decode step runs its base
product plus two small LoRA products, a dropout, casts, a scale and an add: per-step
overheads, not arithmetic, then bound decoding. Merging the adapter into the weights
removes them, but in bf16 it rounds the adapter's small delta into weights 100-1000
times larger: measured on a trained quickstart adapter, sampled tokens' log-probs then
differed from the trainer's by 0.019 on average (up to 1.03), against 0.007 (up to 0.35)
unmerged. Here each LoRA layer holds [W; A] stacked, so one product gives the base output
and the adapter's down-projection x A^T; a rank-r product with s B adds the adapter's
part, at the precision of the trainer's own path (0.005 on the same adapter). [W; A] and
s B are rebuilt whenever the adapter's parameters changed, [W; A] and the output head in
oneDNN's packed layout where torch has it; every other tensor (embeddings, norms) is the
training model's own, not a copy.
"""

from __future__ import annotations

import copy

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer

PACKED_FOR_ROWS = 32  # the batch size oneDNN's weight layout is chosen for (any works)


def _packed(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` in oneDNN's blocked layout for CPU matrix products, or None where this torch
    build or device has no such op. Products with it equal F.linear's bit for bit here and
    take 10-25% less time at decode shapes, 28% less for the head (measured)."""
    if weight.device.type != "cpu":
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)
    except (AttributeError, RuntimeError):
        return None


def _linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None
            ) -> torch.Tensor:
    if packed is None:
        return torch.nn.functional.linear(x, weight)
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


class FusedLoRALinear(torch.nn.Module):
    """y = x W^T + (x A^T)(s B)^T + bias, with W and A one stacked matrix."""

    def __init__(self, base: torch.nn.Linear, rank: int) -> None:
        super().__init__()
        self.out_features = base.out_features
        self._base_weight = base.weight  # the training model's own, read at each refresh
        # filled by `load`, which the sampler calls before any use
        self.stacked = base.weight.new_empty((0, base.in_features))
        self.packed: torch.Tensor | None = None
        self.up = base.weight.new_empty((base.out_features, rank))
        self.bias = base.bias

    def load(self, down: torch.Tensor, up: torch.Tensor) -> None:
        """Set A and s B (and W, unchanged but read again: no stale copy survives)."""
        self.stacked = torch.cat([self._base_weight.detach(), down.to(self.stacked.dtype)])
        self.packed = _packed(self.stacked)
        if self.packed is not None:
            self.stacked = self.stacked[:0]  # the packed copy is the one used
        self.up = up.to(self.up.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        both = _linear(x.reshape(-1, x.shape[-1]), self.stacked, self.packed)
        # base part + (x A^T)(s B)^T as one addmm: no separate product and sum
        output = torch.addmm(both[:, : self.out_features], both[:, self.out_features:],
                             self.up.t())
        if self.bias is not None:
            output += self.bias
        return output.view(*x.shape[:-1], self.out_features)


class PackedLinear(torch.nn.Module):
    """A bias-free linear layer (the output head) through the packed weight."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = weight
        self.packed = _packed(weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(x, self.weight, self.packed)


def _lora_layers(model: PeftModel, adapter: str) -> dict[str, LoraLayer] | None:
    """The adapter's layers by their name in the base model, or None if one of them is of
    a kind the fused layer does not cover (not a plain Linear, DoRA, fan-in-fan-out)."""
    layers = {name: module for name, module in model.get_base_model().named_modules()
              if isinstance(module, LoraLayer)}
    for layer in layers.values():
        if (not isinstance(layer.get_base_layer(), torch.nn.Linear)
                or adapter not in layer.lora_A or layer.use_dora.get(adapter, False)
                or getattr(layer, "fan_in_fan_out", False)):
            return None
    return layers


class FusedLoRASampler:
    """`model` samples like the PEFT model; `refresh()` before sampling."""

    def __init__(self, model: PeftModel, layers: dict[str, LoraLayer],
                 adapter_name: str = "default") -> None:
        self._adapter = adapter_name
        self._layers = layers
        base = model.get_base_model()
        # Structure without copying weights: deep-copy with every parameter and buffer
        # mapped to itself, then put a fused layer in each LoRA layer's place.
        shared = {id(tensor): tensor for tensor in [*base.parameters(), *base.buffers()]}
        self.model = copy.deepcopy(base, memo=shared)
        for name, layer in layers.items():
            rank = layer.r[adapter_name]
            self.model.set_submodule(name, FusedLoRALinear(layer.get_base_layer(), rank))
        head = self.model.get_output_embeddings()
        if type(head) is torch.nn.Linear and head.bias is None:  # the head is never adapted
            self.model.set_output_embeddings(PackedLinear(head.weight))
        self.model.eval()
        self._copied_state: tuple[int, ...] | None = None

    @classmethod
    def of(cls, model: PeftModel, adapter_name: str = "default") -> FusedLoRASampler | None:
        """A sampler for `model`, or None where its adapter has layers it cannot fuse."""
        layers = _lora_layers(model, adapter_name)
        return None if layers is None else cls(model, layers, adapter_name)

    def _adapter_state(self) -> tuple[int, ...]:
        """Changes whenever an adapter parameter is written in place (optimiser steps,
        loading an adapter): torch counts the in-place writes of every tensor."""
        return tuple(parameter._version for layer in self._layers.values()
                     for parameter in (layer.lora_A[self._adapter].weight,
                                       layer.lora_B[self._adapter].weight))

    def refresh(self) -> bool:
        """Copy the adapter's current weights in if they changed; True if it copied."""
        state = self._adapter_state()
        if state == self._copied_state:
            return False
        with torch.no_grad():
            for name, layer in self._layers.items():
                fused = self.model.get_submodule(name)
                assert isinstance(fused, FusedLoRALinear)
                fused.load(layer.lora_A[self._adapter].weight,
                           layer.lora_B[self._adapter].weight * layer.scaling[self._adapter])
        self._copied_state = state
        return True
