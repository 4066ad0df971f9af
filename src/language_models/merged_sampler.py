"""A copy of the base model with the LoRA adapter merged into its weights, for sampling.

With the adapter as separate modules, every linear layer of every decode step runs its
base product plus two small LoRA products, a dropout, a scale and an add: on the
embedded model at batch 32 that is 21 matrix products per layer instead of 7, and the
per-step overheads, not arithmetic, bound decoding. Here the LoRA layers' weights are
W + scale * B A, recomputed (in float32, then cast to the sampler's dtype) whenever the
adapter's parameters changed; every other tensor (embeddings, norms, the tied head) is
the training model's own, not a copy. The trainer keeps the unmerged adapter in float32.
"""

from __future__ import annotations

import copy

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer


def _lora_layers(model: PeftModel) -> dict[str, LoraLayer]:
    """The adapter's layers by their name in the base model."""
    return {name: module for name, module in model.get_base_model().named_modules()
            if isinstance(module, LoraLayer)}


class MergedSampler:
    def __init__(self, model: PeftModel, adapter_name: str = "default") -> None:
        self._peft = model
        self._adapter = adapter_name
        self._layers = _lora_layers(model)
        base = model.get_base_model()
        # Structure without copying weights: deep-copy with every parameter and buffer
        # mapped to itself, then give each LoRA layer's place a plain linear of its own.
        shared = {id(tensor): tensor for tensor in [*base.parameters(), *base.buffers()]}
        self.model = copy.deepcopy(base, memo=shared)
        for name, layer in self._layers.items():
            source = layer.get_base_layer()
            merged = torch.nn.Linear(source.in_features, source.out_features,
                                     bias=source.bias is not None, device="meta")
            merged.weight = torch.nn.Parameter(torch.empty_like(source.weight),
                                               requires_grad=False)
            if source.bias is not None:
                merged.bias = source.bias
            self.model.set_submodule(name, merged)
        self.model.eval()
        self._merged_state: tuple[int, ...] | None = None

    def _adapter_state(self) -> tuple[int, ...]:
        """Changes whenever an adapter parameter is written in place (optimiser steps,
        loading an adapter): torch counts the in-place writes of every tensor."""
        return tuple(parameter._version for layer in self._layers.values()
                     for parameter in (layer.lora_A[self._adapter].weight,
                                       layer.lora_B[self._adapter].weight))

    def refresh(self) -> bool:
        """Merge the adapter's current weights in if they changed; True if it merged."""
        state = self._adapter_state()
        if state == self._merged_state:
            return False
        with torch.no_grad():
            for name, layer in self._layers.items():
                base_weight = layer.get_base_layer().weight
                delta = layer.get_delta_weight(self._adapter)
                target = self.model.get_submodule(name).weight
                target.copy_((base_weight.float() + delta.float()).to(target.dtype))
        self._merged_state = state
        return True
