"""Reducing masked per-token values to one scalar (references section 1)."""

from __future__ import annotations

from typing import Literal

import torch

LossAggregation = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: LossAggregation,
              norm_length: int | None = None, num_sequences: int | None = None,
              num_tokens: float | None = None) -> torch.Tensor:
    """Reduce masked per-token values to a scalar.

    token-mean:              sum(L m) / sum(m)
    seq-mean-token-mean:     mean over sequences of sum_t(L m) / sum_t(m)
    seq-mean-token-sum:      mean over sequences of sum_t(L m)
    seq-mean-token-sum-norm: sum(L m) / (num_seqs * norm_length)   (Dr.GRPO)

    `num_sequences` / `num_tokens` override the denominators, so that micro-batches of a
    mini-batch add up to the mini-batch's value. Sequences with an empty mask count in
    num_sequences but add nothing.
    """
    masked = per_token * mask
    sequences = num_sequences if num_sequences is not None else per_token.shape[0]
    if mode == "token-mean":
        tokens = num_tokens if num_tokens is not None else mask.sum()
        return masked.sum() / max(float(tokens), 1.0)
    if mode == "seq-mean-token-mean":
        per_sequence = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_sequence.sum() / max(sequences, 1)
    if mode == "seq-mean-token-sum":
        return masked.sum() / max(sequences, 1)
    if mode == "seq-mean-token-sum-norm":
        length = norm_length if norm_length is not None else int(mask.sum(-1).max().item())
        return masked.sum() / max(sequences * max(length, 1), 1)
    raise ValueError(f"unknown loss aggregation '{mode}'")
