"""The in-process sampler: a plain decode loop over the KV cache, with log-probs.

A decode loop rather than `generate`, so that each sampled token's log-prob comes from
exactly the distribution it was drawn from, and so that finished rows leave the batch
(multi-turn batches finish unevenly). A group's identical prompts are prefilled once, and
so is the prefix that all of a call's prompts share; a row's keys and values when it
finished are kept for its next turn (`PrefixCache`), as long as the weights do not change.
The policy (src/language_models/instance/huggingface_lora_language_model.py) owns the
weights and hands this loop the model to decode with (its fused LoRA copy, say).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from src.language_models.kv_cache import growing_cache
from src.language_models.language_model import Generation, SamplingParams
from src.language_models.prefix_cache import CachedPrefix, PrefixCache

COMPACT_BELOW = 0.75  # drop finished rows from the decode batch once fewer than this run
# a prefix shorter than this, shared by a call's prompts, is left to the batched prefill:
# its own forward would cost more than it saves
SHARED_PROMPT_MIN_TOKENS = 16
SAMPLING_BLOCK = 256  # vocabulary entries per block of the two-level token draw


def cached_row(cache: DynamicCache, attention: torch.Tensor, position: int,
                token_ids: tuple[int, ...]) -> CachedPrefix:
    """One batch row's keys and values at its unmasked positions."""
    valid = attention[position].bool()
    layers = [(layer.keys[position][:, valid].clone(), layer.values[position][:, valid].clone())
              for layer in cache.layers]
    if layers[0][0].shape[1] != len(token_ids):
        raise RuntimeError(f"cache holds {layers[0][0].shape[1]} positions for "
                           f"{len(token_ids)} fed tokens")
    return CachedPrefix(token_ids, layers)


def next_token_logits(model: torch.nn.Module, input_ids: torch.Tensor,
                       attention: torch.Tensor, positions: torch.Tensor,
                       cache: DynamicCache) -> torch.Tensor:
    """Logits after each row's last position [rows, vocab], the cache extended in place.

    The head is applied here to a contiguous [rows, hidden] slice: given the strided
    [rows, 1, hidden] slice of a prefill (`logits_to_keep=1`), torch's linear takes a
    batched path that copies the [hidden, vocab] weight once per row (0.4 s of a 0.9 s
    prefill of 8 rows in bf16, measured)."""
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention,
                                 position_ids=positions, past_key_values=cache,
                                 use_cache=True).last_hidden_state
    return model.get_output_embeddings()(hidden[:, -1, :].contiguous())


def sample_from_logits(logits: torch.Tensor, temperature: float,
                        top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return it with its log-prob under the sampling distribution.

    Each [rows, vocab] float32 tensor made here is a fresh 6 MB allocation at batch 32,
    whose pages are faulted in and zeroed again at every step: hence one softmax, straight
    from the head's dtype, and the log of the drawn tokens' probabilities rather than a
    log_softmax over the vocabulary. On bf16 logits of 32 rows x 49,152 a draw took 1.0-1.4
    ms, against 17-25 ms for the single-level draw it replaced (five such tensors, one a
    float64 running sum over the vocabulary), measured in isolation."""
    if temperature == 0.0:
        tokens = logits.argmax(dim=-1)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)
    if temperature != 1.0:
        logits = logits.to(torch.float32, copy=True).div_(temperature)  # the caller's stays
    if top_p < 1.0:
        sorted_logits, order = logits.float().sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        outside = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
        logits = torch.full_like(sorted_logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    tokens = _inverse_cdf_draw(probs)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1).log()


def _inverse_cdf_draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` [rows, vocab] (>= 0, not all 0): the same distribution
    as torch.multinomial, which takes ~14 ms for 16 rows x 49k tokens on CPU.

    Two levels of inverse CDF: a block of SAMPLING_BLOCK tokens by the blocks' masses, then
    a token within it, so that the float64 running sums cover 192 + 256 entries instead of
    the whole vocabulary. Each level takes the first entry whose running sum exceeds the
    draw, with the draw kept below the level's total, so an entry of zero mass (outside
    the nucleus) is never drawn."""
    rows, vocab = probs.shape
    if vocab % SAMPLING_BLOCK:
        probs = torch.nn.functional.pad(probs, (0, -vocab % SAMPLING_BLOCK))
    blocks = probs.view(rows, -1, SAMPLING_BLOCK)
    block_cdf = blocks.sum(dim=-1).double().cumsum(dim=-1)
    uniform = torch.rand((rows, 1), dtype=torch.float64, device=probs.device)
    draw = _below(uniform * block_cdf[:, -1:], block_cdf[:, -1:])
    block = torch.searchsorted(block_cdf, draw, right=True)
    mass_before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)), 0.0)
    within_cdf = blocks.gather(1, block[:, :, None].expand(-1, -1, SAMPLING_BLOCK)
                               ).squeeze(1).double().cumsum(dim=-1)
    # the block's own running sum can end a rounding error below its mass in block_cdf
    within = torch.searchsorted(within_cdf, _below(draw - mass_before, within_cdf[:, -1:]),
                                right=True)
    return (block * SAMPLING_BLOCK + within).squeeze(-1)


def _below(values: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """`values`, each at most the largest float below its row's `limit`."""
    return torch.minimum(values, torch.nextafter(limit, torch.zeros_like(limit)))


class KVCacheSampler:
    """Samples rows with a model's KV cache; `prefix_cache` carries finished rows' keys
    and values to their next turn (cleared by its owner whenever the weights change)."""

    def __init__(self, device: torch.device, pad_id: int, prefix_cache: PrefixCache,
                 prefix_caching: bool = True) -> None:
        self.device = device
        self.pad_id = pad_id
        self._prefix_cache = prefix_cache
        self.prefix_caching = prefix_caching

    def sample(self, model: torch.nn.Module, rows: list[list[int]], params: SamplingParams,
               end_of_turn_ids: Sequence[int], policy_version: int) -> list[Generation]:
        """One generation per row, sampled with `model` (no gradient; the caller seeds
        torch's generator and sets eval mode), each labelled with `policy_version`."""
        stop_ids = torch.tensor(sorted(set(end_of_turn_ids) | set(params.stop_token_ids)),
                                device=self.device)
        # Identical rows (a group's G copies of one prompt) are prefilled once, then
        # their cache rows are repeated.
        first_of: dict[tuple[int, ...], int] = {}
        source = [first_of.setdefault(tuple(row), len(first_of)) for row in rows]
        distinct = [list(row) for row in first_of]
        prefixes = [self._prefix_cache.longest_prefix(row) if self.prefix_caching else None
                    for row in distinct]
        prefixes = self._with_shared_prompt_prefix(model, distinct, prefixes)
        cache, input_ids, attention, positions = self._prefill_inputs(
            distinct, prefixes, reserve=params.max_new_tokens)
        logits = next_token_logits(model, input_ids, attention, positions, cache)
        if len(distinct) < len(rows):
            repeat = torch.tensor(source, device=self.device)
            cache.batch_select_indices(repeat)
            attention, positions, logits = attention[repeat], positions[repeat], logits[repeat]
        next_position = positions[:, -1:] + 1

        sampled: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        finish: list[str] = ["length"] * len(rows)
        ends: list[CachedPrefix] = []  # each row's keys/values when it finished
        alive = torch.arange(len(rows), device=self.device)  # original row of each batch row
        # Finished rows stay in the batch (their tokens ignored) until a quarter of it has
        # finished: dropping them copies every layer's cache, which costs more than
        # decoding a few extra rows.
        running = torch.ones(len(rows), dtype=torch.bool, device=self.device)
        for step in range(params.max_new_tokens):
            tokens, token_logprobs = sample_from_logits(logits, params.temperature,
                                                         params.top_p)
            stopped = torch.isin(tokens, stop_ids) & running
            token_list, logprob_list = tokens.tolist(), token_logprobs.tolist()
            stop_list, row_list = stopped.tolist(), alive.tolist()
            for position in running.nonzero().squeeze(-1).tolist():
                row = row_list[position]
                sampled[row].append(token_list[position])
                logprobs[row].append(logprob_list[position])
                if stop_list[position]:
                    finish[row] = "stop"
            last_step = step == params.max_new_tokens - 1
            if self.prefix_caching:
                done = running if last_step else stopped
                for position in done.nonzero().squeeze(-1).tolist():
                    row = row_list[position]
                    # the cache holds what was fed: the prompt and all but the newest token
                    ends.append(cached_row(cache, attention, position,
                                            (*rows[row], *sampled[row][:-1])))
            running = running & ~stopped
            if last_step or not bool(running.any()):
                break
            if int(running.sum()) <= COMPACT_BELOW * len(running):
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                alive, tokens, running = alive[keep], tokens[keep], running[keep]
                attention, next_position = attention[keep], next_position[keep]
            attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=-1)
            logits = next_token_logits(model, tokens[:, None], attention, next_position,
                                        cache)
            next_position = next_position + 1
        if self.prefix_caching:
            self._prefix_cache.replace(ends)
        return [Generation(sampled[i], logprobs[i], finish[i], policy_version)  # type: ignore[arg-type]
                for i in range(len(rows))]

    def _with_shared_prompt_prefix(self, model: torch.nn.Module, rows: list[list[int]],
                                   prefixes: list[CachedPrefix | None]
                                   ) -> list[CachedPrefix | None]:
        """`prefixes`, with the longest prefix that the call's distinct prompts share (the
        system prompt and the task's instructions) prefilled once, as one row, and given to
        each row that has no longer one cached: the quickstart's 8 prompts of 87 tokens
        share 65, a DB-bench batch's first prompts most of their 380."""
        length = min(len(os.path.commonprefix(rows)), *(len(row) - 1 for row in rows))
        users = sum(prefix is None or len(prefix.token_ids) < length for prefix in prefixes)
        if length < SHARED_PROMPT_MIN_TOKENS or users < 2:
            return prefixes
        token_ids = torch.tensor([rows[0][:length]], device=self.device)
        attention = torch.ones_like(token_ids)
        cache = growing_cache()
        next_token_logits(model, token_ids, attention,  # the one head row costs ~0.1 ms
                           torch.arange(length, device=self.device)[None], cache)
        shared = cached_row(cache, attention, 0, tuple(rows[0][:length]))
        return [prefix if prefix is not None and len(prefix.token_ids) >= length else shared
                for prefix in prefixes]

    def _prefill_inputs(self, rows: list[list[int]], prefixes: list[CachedPrefix | None],
                        reserve: int = 0
                        ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cache, ids, attention mask and positions for the first forward of a call; the
        cache has room for `reserve` more positions.

        Row layout: [padding][cached prefix][gap][new tokens], each part right-aligned, so
        that every row's newest token sits in the last column; padding and gap are masked.
        Positions continue from the cached length (the cached keys carry their rotary
        positions already).
        """
        cached = [len(prefix.token_ids) if prefix else 0 for prefix in prefixes]
        news = [row[length:] for row, length in zip(rows, cached, strict=True)]
        cache_width, new_width = max(cached), max(len(new) for new in news)
        input_ids = torch.full((len(rows), new_width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), cache_width + new_width), dtype=torch.long)
        positions = torch.zeros((len(rows), new_width), dtype=torch.long)
        for index, (new, length) in enumerate(zip(news, cached, strict=True)):
            input_ids[index, new_width - len(new):] = torch.tensor(new)
            attention[index, cache_width - length:cache_width] = 1
            attention[index, cache_width + new_width - len(new):] = 1
            positions[index, new_width - len(new):] = torch.arange(length, length + len(new))
        layers = []
        if cache_width:
            template = next(prefix for prefix in prefixes if prefix is not None).layers
            for layer, (keys, values) in enumerate(template):
                batch_keys = keys.new_zeros((len(rows), keys.shape[0], cache_width,
                                             keys.shape[2]))
                batch_values = values.new_zeros((len(rows), values.shape[0], cache_width,
                                                 values.shape[2]))
                for index, prefix in enumerate(prefixes):
                    if prefix is not None:
                        length = cached[index]
                        batch_keys[index, :, cache_width - length:] = prefix.layers[layer][0]
                        batch_values[index, :, cache_width - length:] = prefix.layers[layer][1]
                layers.append((batch_keys, batch_values))
        cache = growing_cache(layers, reserve=cache_width + new_width + reserve)
        return (cache, input_ids.to(self.device), attention.to(self.device),
                positions.to(self.device))
