"""The in-process sampler through transformers' own `model.generate`.

For models or cache types that the KV-cache decode loop (kv_cache_sampler.py) does not
cover, and as a reference to check that loop against: whatever transformers can generate
with, this samples with. Rows are left-padded into one batch and decoded until every row
has stopped; each token's log-prob is read from the scores `generate` drew it from (after
temperature and top-p), so it is the log-prob the `Generation` contract asks for. It does
none of the KV-cache sampler's work-saving (finished rows stay in the batch, nothing is
reused across calls) and holds every step's [rows, vocabulary] scores until the call
ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from src.language_models.huggingface.sampler import Sampler, stop_ids
from src.language_models.language_model import FinishReason, Generation, SamplingParams

# The settings from which transformers adds logits processors or stopping criteria, each
# off: given as `generate`'s arguments they override the model's generation_config.json
# (Qwen2.5's sets top_k 20 and repetition_penalty 1.05), so that tokens are drawn and
# stopped by SamplingParams alone.
NO_PROCESSING: dict[str, Any] = dict.fromkeys((
    "top_k", "top_h", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
    "repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "sequence_bias", "min_length",
    "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "guidance_scale", "watermarking_config", "renormalize_logits", "stop_strings",
    "max_time"))


class GenerateSampler(Sampler):
    """Samples rows with `model.generate` (any transformers causal LM, PEFT's included)."""

    def __init__(self, device: torch.device, pad_id: int) -> None:
        self.device = device
        self.pad_id = pad_id

    def sample(self, model: torch.nn.Module, rows: list[list[int]], params: SamplingParams,
               end_of_turn_ids: Sequence[int], policy_version: int) -> list[Generation]:
        stops = stop_ids(end_of_turn_ids, params)
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for index, row in enumerate(rows):  # left-padded: every row's next token is appended
            input_ids[index, width - len(row):] = torch.tensor(row)
            attention[index, width - len(row):] = 1
        greedy = params.temperature == 0.0
        output = model.generate(
            input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
            **NO_PROCESSING, do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p, max_new_tokens=params.max_new_tokens,
            eos_token_id=stops, pad_token_id=self.pad_id, output_scores=True,
            return_dict_in_generate=True)
        sampled = output.sequences[:, width:]
        # scores[t] is step t's distribution after temperature and top-p (raw logits when
        # greedy), in float32: the one its token was drawn from
        logprobs = torch.stack([
            torch.log_softmax(scores, dim=-1).gather(-1, sampled[:, step, None]).squeeze(-1)
            for step, scores in enumerate(output.scores)], dim=-1)
        ending = set(stops)
        generations = []
        for tokens, values in zip(sampled.tolist(), logprobs.tolist(), strict=True):
            # a row that stopped is padded after its stop token, until every row stopped
            end = next((step + 1 for step, token in enumerate(tokens) if token in ending), None)
            finish: FinishReason = "length" if end is None else "stop"
            generations.append(Generation(tokens[:end], values[:end], finish, policy_version))
        return generations
