"""The default in-process sampler: a plain decode loop over the KV cache, with log-probs.

A decode loop of its own rather than transformers' `generate` (generate_sampler.py), for
speed on multi-turn batches: finished rows leave the batch (such batches finish
unevenly), a group's identical prompts are prefilled once, and so is the prefix that all
of a call's prompts share; a row's keys and values when it finished are kept for its next
turn (`PrefixCache`) until the weights change. Each token's log-prob is that of the
distribution it was drawn from (token_draw.py). The policy
(src/language_models/instance/huggingface_lora_language_model.py) owns the weights and
hands this loop the model to decode with (its fused LoRA copy, say).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from src.language_models.huggingface.kv_cache import growing_cache
from src.language_models.huggingface.prefix_cache import CachedPrefix, PrefixCache
from src.language_models.huggingface.sampler import Sampler, stop_ids
from src.language_models.huggingface.token_draw import sample_from_logits
from src.language_models.language_model import Generation, SamplingParams

COMPACT_BELOW = 0.75  # drop finished rows from the decode batch once fewer than this run
# a prefix shorter than this, shared by a call's prompts, is left to the batched prefill:
# its own forward would cost more than it saves
SHARED_PROMPT_MIN_TOKENS = 16


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


class KVCacheSampler(Sampler):
    """Samples rows with a model's KV cache; with `prefix_caching`, `prefix_cache` carries
    finished rows' keys and values to their next turn (dropped when the weights change)."""

    def __init__(self, device: torch.device, pad_id: int, prefix_caching: bool = True) -> None:
        self.device = device
        self.pad_id = pad_id
        self.prefix_cache = PrefixCache()
        self.prefix_caching = prefix_caching

    def weights_changed(self) -> None:
        self.prefix_cache.clear()  # cached keys and values are of the old weights

    def sample(self, model: torch.nn.Module, rows: list[list[int]], params: SamplingParams,
               end_of_turn_ids: Sequence[int], policy_version: int) -> list[Generation]:
        stops = torch.tensor(stop_ids(end_of_turn_ids, params), device=self.device)
        cache, attention, next_position, logits = self.prefill(model, rows,
                                                               params.max_new_tokens)
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
            stopped = torch.isin(tokens, stops) & running
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
            self.prefix_cache.replace(ends)
        return [Generation(sampled[i], logprobs[i], finish[i], policy_version)  # type: ignore[arg-type]
                for i in range(len(rows))]

    def prefill(self, model: torch.nn.Module, rows: list[list[int]], reserve: int
                ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The first forward of a call: the cache (with room for `reserve` more positions),
        the attention mask [rows, width], each row's next position [rows, 1] and the logits
        of its first new token [rows, vocab]. Identical rows (a group's G copies of one
        prompt) are prefilled once, then their cache rows repeated; a row's cached prefix
        and the prefix all rows share are fed once (`_with_shared_prompt_prefix`)."""
        first_of: dict[tuple[int, ...], int] = {}
        source = [first_of.setdefault(tuple(row), len(first_of)) for row in rows]
        distinct = [list(row) for row in first_of]
        prefixes = [self.prefix_cache.longest_prefix(row) if self.prefix_caching else None
                    for row in distinct]
        prefixes = self._with_shared_prompt_prefix(model, distinct, prefixes)
        cache, input_ids, attention, positions = self._prefill_inputs(distinct, prefixes,
                                                                      reserve=reserve)
        logits = next_token_logits(model, input_ids, attention, positions, cache)
        if len(distinct) < len(rows):
            repeat = torch.tensor(source, device=self.device)
            cache.batch_select_indices(repeat)
            attention, positions, logits = attention[repeat], positions[repeat], logits[repeat]
        return cache, attention, positions[:, -1:] + 1, logits

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
