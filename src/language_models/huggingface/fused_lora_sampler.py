"""A copy of the base model for sampling, whose LoRA layers run one matrix product per input.

With the adapter as PEFT modules, every linear layer of every decode step runs its base
product plus two small LoRA products, a dropout, casts, a scale and an add: per-step
overheads, not arithmetic, then bound decoding. Merging the adapter into the weights
removes them, but in bf16 it rounds the adapter's small delta into weights 100-1000
times larger: measured on a trained quickstart adapter, sampled tokens' log-probs then
differed from the trainer's by 0.019 on average (up to 1.03), against 0.007 (up to 0.35)
unmerged. Here the LoRA layers that read the same input (a decoder layer's q, k and v
projections; its gate and up projections) are one group, whose [W_1; ...; W_n; A_1; ...;
A_n] stacked gives every base output and every adapter down-projection x A_i^T in one
product; one rank-(r_1 + ... + r_n) product with the block-diagonal [s_1 B_1, ..., s_n
B_n] adds the adapters' parts, at the precision of the trainer's own path (0.005 on the
same adapter). At batch 32 each oneDNN call costs 20-40 us whatever its size, so a
decoder layer's 7 + 7 calls become 4 + 4. The stacked weights are rebuilt whenever the
adapter's parameters changed, in oneDNN's packed layout where torch has it, as is the
output head; every other tensor (embeddings, norms) is the training model's own.
"""

from __future__ import annotations

import copy

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer

from src.language_models.huggingface.grouped_attention import GROUPED_SDPA

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


class FusedLoRAProjections:
    """y_i = x W_i^T + (x A_i^T)(s_i B_i)^T + b_i for every projection i of one input x,
    computed together on the first member's call and handed out to the others."""

    def __init__(self, bases: list[torch.nn.Linear], ranks: list[int]) -> None:
        # the training model's own, read at each load (LoRA's `bias: all` trains the biases)
        self._base_weights = [base.weight for base in bases]
        self._base_biases = [base.bias for base in bases]
        self.out_features = [base.out_features for base in bases]
        like = bases[0].weight
        # filled by `load`, which the sampler calls before any use
        self.bias: torch.Tensor | None = None
        self.stacked = like.new_empty((0, bases[0].in_features))
        self.packed: torch.Tensor | None = None
        self.up = like.new_zeros((sum(self.out_features), sum(ranks)))
        self._input: torch.Tensor | None = None  # the input whose outputs are not all taken
        self._input_version = -1
        self._output: torch.Tensor | None = None
        self._untaken = 0

    def load(self, downs: list[torch.Tensor], ups: list[torch.Tensor]) -> None:
        """Set every A_i and s_i B_i (and W_i, unchanged but read again: no stale copy)."""
        self.stacked = torch.cat([weight.detach() for weight in self._base_weights]
                                 + [down.to(self.stacked.dtype) for down in downs])
        self.packed = _packed(self.stacked)
        if self.packed is not None:
            self.stacked = self.stacked[:0]  # the packed copy is the one used
        if any(bias is not None for bias in self._base_biases):
            self.bias = torch.cat([
                bias.detach() if bias is not None else self.up.new_zeros(size)
                for bias, size in zip(self._base_biases, self.out_features, strict=True)])
        self.up.zero_()
        row = column = 0
        for up in ups:
            self.up[row:row + up.shape[0], column:column + up.shape[1]] = up
            row, column = row + up.shape[0], column + up.shape[1]
        self._release()

    def output(self, x: torch.Tensor) -> torch.Tensor:
        """[rows, sum of out_features] for input x (flattened to rows)."""
        if self._input is x and x._version == self._input_version:
            assert self._output is not None
            output = self._output
        else:
            total = sum(self.out_features)
            both = _linear(x.reshape(-1, x.shape[-1]), self.stacked, self.packed)
            # base parts + (x A^T)(s B)^T as one addmm: no separate product and sum
            output = torch.addmm(both[:, :total], both[:, total:], self.up.t())
            if self.bias is not None:
                output += self.bias
            if len(self.out_features) > 1:
                self._input, self._input_version = x, x._version
                self._output, self._untaken = output, len(self.out_features)
        self._untaken -= 1
        if self._untaken <= 0:
            self._release()  # every member has its part: hold no tensors between steps
        return output

    def _release(self) -> None:
        self._input = self._output = None
        self._untaken = 0


class FusedLoRALinear(torch.nn.Module):
    """Member `index` of a group of projections: its columns of the group's output."""

    def __init__(self, projections: FusedLoRAProjections, index: int) -> None:
        super().__init__()
        self.projections = projections
        self.out_features = projections.out_features[index]
        self._start = sum(projections.out_features[:index])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self.projections.output(x)[:, self._start:self._start + self.out_features]
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


@torch.no_grad()
def shared_input_groups(model: PeftModel, layers: dict[str, LoraLayer]) -> list[list[str]]:
    """The LoRA layers grouped by the input tensor one forward hands them (the same tensor
    object, not equal values), each group in call order. Found by a one-token forward
    rather than by layer names, so that any architecture groups what it shares."""
    inputs: dict[str, torch.Tensor] = {}  # in call order

    def recorder(name: str):
        def record(_module: torch.nn.Module, args: tuple) -> None:
            inputs.setdefault(name, args[0])
        return record

    hooks = [layer.register_forward_pre_hook(recorder(name)) for name, layer in layers.items()]
    was_training = model.training
    model.eval()
    try:
        device = model.get_base_model().get_input_embeddings().weight.device
        model.get_base_model()(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device))
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    groups: list[list[str]] = []
    for name in inputs:
        group = next((group for group in groups if inputs[group[0]] is inputs[name]), None)
        if group is None:
            groups.append([name])
        else:
            group.append(name)
    unreached = [[name] for name in layers if name not in inputs]
    return groups + unreached


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
        if self.model.config._attn_implementation == "sdpa":
            # transformers' sdpa copies grouped key/value heads whenever a mask is given,
            # as a sampler's padded batches always do: the copy, which only samples,
            # decodes with them grouped (the training model keeps its kernels)
            self.model.config._attn_implementation = GROUPED_SDPA
        self._groups: list[tuple[FusedLoRAProjections, list[LoraLayer]]] = []
        for names in shared_input_groups(model, layers):
            members = [layers[name] for name in names]
            projections = FusedLoRAProjections(
                [member.get_base_layer() for member in members],
                [member.r[adapter_name] for member in members])
            for index, name in enumerate(names):
                self.model.set_submodule(name, FusedLoRALinear(projections, index))
            self._groups.append((projections, members))
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
        """Changes whenever a parameter the fused layers copy is written in place
        (optimiser steps, loading an adapter; the base biases where LoRA trains them):
        torch counts the in-place writes of every tensor."""
        return tuple(parameter._version for layer in self._layers.values()
                     for parameter in (layer.lora_A[self._adapter].weight,
                                       layer.lora_B[self._adapter].weight,
                                       layer.get_base_layer().bias)
                     if parameter is not None)

    def refresh(self) -> bool:
        """Copy the adapter's current weights in if they changed; True if it copied."""
        state = self._adapter_state()
        if state == self._copied_state:
            return False
        adapter = self._adapter
        with torch.no_grad():
            for projections, members in self._groups:
                projections.load(
                    [member.lora_A[adapter].weight for member in members],
                    [member.lora_B[adapter].weight * member.scaling[adapter]
                     for member in members])
        self._copied_state = state
        return True
