"""Policy-gradient maths, as in references section 1. Plain functions over tensors.

Notation: R returns (one per completion), A advantages, logp / old / ref per-token
log-probs of the current, sampling and reference policies, m the loss mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

AdvantageEstimator = Literal["grpo", "dr_grpo", "rloo", "reinforce"]
LossAggregation = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]
EPS = 1e-6


def group_statistics(returns: torch.Tensor, group_ids: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per completion: its group's mean, unbiased std (n-1) and size."""
    mean = torch.zeros_like(returns)
    std = torch.zeros_like(returns)
    size = torch.zeros_like(returns)
    for group in group_ids.unique():
        members = group_ids == group
        values = returns[members]
        mean[members] = values.mean()
        std[members] = values.std(unbiased=True) if values.numel() > 1 else 0.0
        size[members] = values.numel()
    return mean, std, size


def advantages(returns: torch.Tensor, group_ids: torch.Tensor, estimator: AdvantageEstimator,
               baseline: torch.Tensor | float = 0.0) -> torch.Tensor:
    """One advantage per completion.

    grpo:      (R - mean_g) / (std_g + eps); a group of one has no spread and, as in
               verl, is taken with mean 0 and std 1, so A = R.
    dr_grpo:   R - mean_g.
    rloo:      R - mean of the other G-1 returns of the group (A = R for a group of one).
    reinforce: R - baseline (0, a running mean, or the group mean, chosen by the caller).
    """
    if estimator == "reinforce":
        return returns - baseline
    mean, std, size = group_statistics(returns, group_ids)
    single = size == 1
    if estimator == "grpo":
        result = (returns - mean) / (std + EPS)
    elif estimator == "dr_grpo":
        result = returns - mean
    elif estimator == "rloo":
        others = (mean * size - returns) / (size - 1).clamp(min=1)
        result = returns - others
    else:
        raise ValueError(f"unknown advantage estimator '{estimator}'")
    return torch.where(single, returns, result)


def zero_spread_groups(returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """True for completions whose group (of two or more) has all returns equal."""
    _, std, size = group_statistics(returns, group_ids)
    return (std == 0) & (size > 1)


def whiten(values: torch.Tensor) -> torch.Tensor:
    """REINFORCE++: normalise advantages over the whole batch."""
    if values.numel() < 2:
        return values - values.mean()
    return (values - values.mean()) / (values.std(unbiased=True) + EPS)


@dataclass
class PolicyLoss:
    per_token: torch.Tensor  # [batch, length]
    clipped_low: torch.Tensor  # bool: ratio < 1 - eps_low with A < 0 (clip active)
    clipped_high: torch.Tensor  # bool: ratio > 1 + eps_high with A > 0 (clip active)


def ppo_clip_loss(logp: torch.Tensor, old: torch.Tensor, advantage: torch.Tensor,
                  eps_low: float = 0.2, eps_high: float = 0.2,
                  dual_clip: float | None = 3.0) -> PolicyLoss:
    """L = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)); for A < 0 also L = min(L, -A c).

    `advantage` broadcasts over tokens ([batch, 1]). With one update per batch r = 1 but
    the gradient is the policy gradient, not zero.
    """
    ratio = torch.exp(torch.clamp(logp - old, -20.0, 20.0))
    unclipped = -advantage * ratio
    clipped = -advantage * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(advantage < 0, torch.minimum(loss, -advantage * dual_clip), loss)
    return PolicyLoss(
        per_token=loss,
        clipped_low=(ratio < 1.0 - eps_low) & (advantage < 0),
        clipped_high=(ratio > 1.0 + eps_high) & (advantage > 0),
    )


def reinforce_loss(logp: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """L = -A logp."""
    return -advantage * logp


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


def kl_penalty(logp: torch.Tensor, ref: torch.Tensor, estimator: KLEstimator) -> torch.Tensor:
    """Per-token KL estimate with D = logp - ref: k1 = D, k2 = D^2/2, k3 = exp(-D) + D - 1."""
    difference = logp - ref
    if estimator == "k1":
        return difference
    if estimator == "k2":
        return 0.5 * difference.square()
    if estimator == "k3":
        return torch.clamp(torch.exp(-difference) + difference - 1.0, -10.0, 10.0)
    raise ValueError(f"unknown KL estimator '{estimator}'")
