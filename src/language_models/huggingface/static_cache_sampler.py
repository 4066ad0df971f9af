"""Decoding over a static KV cache, each decode step replayed as a captured CUDA graph.

On a GPU the KV-cache sampler's decode step is bound by kernel launches, not by the GPU:
a step of the 135M model launches a few hundred small kernels from Python, and the GPU
was busy 9-18 ms of a 51-69 ms step (docs/gpu.md). Here a call's rows are padded to a
bucket of rows and its keys and values live in buffers of a fixed length (the prefill's
width plus `max_new_tokens`, rounded up), so that every decode step has the same shapes
and reads and writes the same addresses: on CUDA it is captured once per (rows, length)
bucket as a CUDA graph and then replayed, one launch a step. Attention reads the whole
buffer with the unwritten positions masked (src.language_models.huggingface.grouped_attention).

The prefill, the prefix cache and the prefix shared by a call's prompts are the KV-cache
sampler's; the draw (src.language_models.huggingface.token_draw) runs outside the graph from torch's
global generator, so a seeded call repeats. Finished rows stay in the batch, their
tokens ignored (a captured batch cannot shrink), and the rows' stops are read back every
`CHECK_EVERY` steps rather than every step, so that the CPU queues steps ahead of the
GPU. Graphs and buffers are dropped whenever the weights change: a graph holds the
addresses of the tensors it read when it was captured. On a CPU the same steps run
eagerly (graphs are CUDA's), which is how the tests check this loop against the
KV-cache sampler's.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from src.language_models.huggingface.custom_masks import custom_mask
from src.language_models.huggingface.kv_cache_sampler import (
    KVCacheSampler,
    cached_row,
    next_token_logits,
)
from src.language_models.huggingface.sampler import stop_ids
from src.language_models.huggingface.token_draw import sample_from_logits
from src.language_models.language_model import FinishReason, Generation, SamplingParams

LENGTH_BUCKET = 256  # cache lengths are multiples of this
CHECK_EVERY = 16  # decode steps between reads of whether every row has stopped
MAX_GRAPHS = 4  # captured (rows, length) buckets kept; the least recently used goes


def row_bucket(rows: int) -> int:
    """The padded batch a call of `rows` rows decodes in: a power of two up to 16, then a
    multiple of 16, so that calls of nearby sizes replay one graph."""
    if rows <= 16:
        return 1 << (rows - 1).bit_length()
    return -(-rows // 16) * 16


class StaticLayer(DynamicLayer):
    """Keys and values [batch, heads, length, head_dim] in buffers that never move; an
    update writes its one position at `column`, a device tensor the sampler advances."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, column: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values, self._column = keys, values, column
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        with plain_index_kernels():
            self.keys.index_copy_(2, self._column, key_states)
            self.values.index_copy_(2, self._column, value_states)
        return self.keys, self.values


@contextmanager
def plain_index_kernels() -> Iterator[None]:
    """torch's own index kernels, even in the reproducible mode. Copying into one column
    has no repeated index, so the plain kernel writes the same bits in any order; the
    mode's alternative sorts the indices first (more launches a step, and not the kernel
    known to replay in a CUDA graph). The flag is the process's: nothing else runs kernels
    while a policy samples in process (overlapped rollouts sample in a pool's processes)."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


@dataclass
class DecodeState:
    """One bucket's fixed tensors: what a captured step reads and writes."""

    cache: DynamicCache  # of StaticLayers
    tokens: torch.Tensor  # [bucket, 1], the tokens fed
    positions: torch.Tensor  # [bucket, 1], their rotary positions
    column: torch.Tensor  # [1], the cache column the step writes
    mask: torch.Tensor  # [bucket, 1, 1, length] bool, True: may attend
    logits: torch.Tensor | None = None  # [bucket, vocab], the step's output
    graph: torch.cuda.CUDAGraph | None = None


class StaticCacheSampler(KVCacheSampler):
    """Samples rows like the KV-cache sampler, decoding over a static cache; on CUDA each
    decode step is a replayed CUDA graph (`capture_graphs`)."""

    @staticmethod
    def covers(config: Any) -> bool:
        """Whether models of this (transformers) config decode right here: the step hands
        attention a mask of its own, which a layer with sliding-window attention would
        take for its whole context (transformers builds the window into the masks it makes)."""
        config = config.get_text_config()
        types = getattr(config, "layer_types", None)
        if types is not None:
            return all(kind == "full_attention" for kind in types)
        return (getattr(config, "sliding_window", None) is None
                or getattr(config, "use_sliding_window", True) is False)

    def __init__(self, device: torch.device, pad_id: int, prefix_caching: bool = True,
                 capture_graphs: bool = True) -> None:
        super().__init__(device, pad_id, prefix_caching)
        self.capture_graphs = capture_graphs and device.type == "cuda"
        self._states: dict[tuple[int, int], DecodeState] = {}  # by (rows, length)

    def weights_changed(self) -> None:
        super().weights_changed()
        self._states.clear()  # graphs hold the old weights' addresses

    def sample(self, model: torch.nn.Module, rows: list[list[int]], params: SamplingParams,
               end_of_turn_ids: Sequence[int], policy_version: int) -> list[Generation]:
        if params.max_new_tokens < 2:  # no decode step to capture
            return super().sample(model, rows, params, end_of_turn_ids, policy_version)
        stops = torch.tensor(stop_ids(end_of_turn_ids, params), device=self.device)
        prefilled, attention, next_position, logits = self.prefill(model, rows, 0)
        count, width = attention.shape
        length = -(-(width + params.max_new_tokens) // LENGTH_BUCKET) * LENGTH_BUCKET
        state = self._state(prefilled, row_bucket(count), length)
        self._load(state, prefilled, attention, next_position)
        del prefilled
        tokens = torch.empty((count, params.max_new_tokens), dtype=torch.long,
                             device=self.device)
        logprobs = torch.empty((count, params.max_new_tokens), dtype=torch.float32,
                               device=self.device)
        stopped = torch.zeros(count, dtype=torch.bool, device=self.device)
        steps = params.max_new_tokens
        for step in range(params.max_new_tokens):
            tokens[:, step], logprobs[:, step] = sample_from_logits(
                logits, params.temperature, params.top_p)
            stopped |= torch.isin(tokens[:, step], stops)
            if step == params.max_new_tokens - 1 or (
                    (step + 1) % CHECK_EVERY == 0 and bool(stopped.all())):
                steps = step + 1
                break
            state.tokens[:count, 0] = tokens[:, step]
            state.mask.index_fill_(3, state.column, True)
            logits = self._step(model, state)[:count]
            state.column += 1
            state.positions += 1
        return self._generations(state, rows, attention, tokens[:, :steps].tolist(),
                                 logprobs[:, :steps].tolist(), stops, policy_version)

    def _state(self, like: DynamicCache, bucket: int, length: int) -> DecodeState:
        """The bucket's tensors, made on first use; past MAX_GRAPHS buckets the least
        recently used goes, with its graph."""
        key = (bucket, length)
        state = self._states.pop(key, None)
        if state is None:
            if len(self._states) >= MAX_GRAPHS:
                self._states.pop(next(iter(self._states)))
            column = torch.zeros(1, dtype=torch.long, device=self.device)
            layers = []
            for layer in like.layers:
                _, heads, _, width = layer.keys.shape
                keys = layer.keys.new_zeros((bucket, heads, length, width))
                layers.append(StaticLayer(keys, torch.zeros_like(keys), column))
            cache = DynamicCache()
            cache.layers.extend(layers)
            state = DecodeState(
                cache, torch.full((bucket, 1), self.pad_id, device=self.device),
                torch.zeros((bucket, 1), dtype=torch.long, device=self.device), column,
                torch.zeros((bucket, 1, 1, length), dtype=torch.bool, device=self.device))
        self._states[key] = state  # the most recently used last
        return state

    def _load(self, state: DecodeState, prefilled: DynamicCache, attention: torch.Tensor,
              next_position: torch.Tensor) -> None:
        """The prefill's keys, values, mask and positions into the bucket's tensors, in
        place (a captured graph reads them where they are)."""
        count, width = attention.shape
        for static, layer in zip(state.cache.layers, prefilled.layers, strict=True):
            static.keys[:count, :, :width] = layer.keys
            static.values[:count, :, :width] = layer.values
        state.mask.zero_()
        state.mask[:count, 0, 0, :width] = attention.bool()
        state.mask[count:, 0, 0, 0] = True  # padding rows attend somewhere: no NaN
        state.positions.zero_()
        state.positions[:count] = next_position
        state.column.fill_(width)

    def _step(self, model: torch.nn.Module, state: DecodeState) -> torch.Tensor:
        """One decode step's logits [bucket, vocab]: the captured graph replayed, captured
        at its bucket's first step (after a warm-up step on a side stream, which writes the
        same cache column the replay writes again). A forward that cannot be captured is
        run eagerly from then on, with a warning."""
        if not self.capture_graphs:
            return self._forward(model, state)
        with torch.cuda.device(self.device):  # streams and graphs are the current device's
            return self._replayed(model, state)

    def _replayed(self, model: torch.nn.Module, state: DecodeState) -> torch.Tensor:
        if state.graph is None:
            try:
                self._capture(model, state)
            except RuntimeError as error:  # a model whose forward cannot be captured
                warnings.warn(f"decoding without CUDA graphs: capturing a decode step of "
                              f"{type(model).__name__} failed ({error})", stacklevel=2)
                self.capture_graphs = False
                return self._forward(model, state)
        assert state.graph is not None and state.logits is not None
        state.graph.replay()
        return state.logits

    def _capture(self, model: torch.nn.Module, state: DecodeState) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._forward(model, state)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = self._forward(model, state)
        state.graph, state.logits = graph, logits

    @staticmethod
    def _forward(model: torch.nn.Module, state: DecodeState) -> torch.Tensor:
        mask = custom_mask(state.mask, model.config._attn_implementation)
        return next_token_logits(model, state.tokens, mask, state.positions, state.cache)

    def _generations(self, state: DecodeState, rows: list[list[int]], attention: torch.Tensor,
                     tokens: list[list[int]], logprobs: list[list[float]],
                     stops: torch.Tensor, policy_version: int) -> list[Generation]:
        """Each row cut after its first stop id; with prefix caching, each row's keys and
        values of what it fed (its prompt and all but its newest token) are kept."""
        ending = set(stops.tolist())
        width = attention.shape[1]
        fed = torch.zeros((len(rows), state.mask.shape[-1]), dtype=torch.long,
                          device=self.device)
        fed[:, :width] = attention
        generations, ends = [], []
        for row, (row_tokens, row_logprobs) in enumerate(zip(tokens, logprobs, strict=True)):
            end = next((step + 1 for step, token in enumerate(row_tokens) if token in ending),
                       None)
            finish: FinishReason = "length" if end is None else "stop"
            generations.append(Generation(row_tokens[:end], row_logprobs[:end], finish,
                                          policy_version))
            if self.prefix_caching:
                sampled = generations[-1].token_ids
                fed[row, width:width + len(sampled) - 1] = 1
                ends.append(cached_row(state.cache, fed, row, (*rows[row], *sampled[:-1])))
        if self.prefix_caching:
            self.prefix_cache.replace(ends)
        return generations
