"""Rollout/trainer mismatch: importance weights against the sampler (references 1b).

s_t is the sampler's log-prob of token t (bf16, vLLM, another process), o_t the trainer's
log-prob of the same token under the same tempered distribution before the update, and
rho_t = exp(o_t - s_t). The PPO ratio is then taken against o; the weight below
multiplies each token's loss and carries no gradient:
- tis, token level: w_t = min(rho_t, C); sequence level: w = min(prod_t rho_t, C).
- mis: tokens (or whole sequences) with rho outside [1/C, C] get weight 0, others 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from src.training.token_metrics import TokenMetrics

Correction = Literal["none", "tis", "mis"]
Level = Literal["token", "sequence"]


@dataclass(frozen=True)
class MismatchCorrection:
    kind: Correction = "none"
    level: Level = "token"
    threshold: float = 2.0

    def __post_init__(self) -> None:
        if self.threshold <= 1.0:
            raise ValueError(f"the importance-weight threshold C must be > 1, got "
                             f"{self.threshold}")

    def weights(self, trainer: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token weights [rows, length] (the mask itself without a correction), and
        which tokens the correction truncated (tis) or masked (mis)."""
        log_ratio = (trainer - sampler) * mask
        if self.level == "sequence":  # log prod_t rho_t, shared by the sequence's tokens
            log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(mask)
        log_ratio = log_ratio.clamp(-50.0, 50.0)
        limit = math.log(self.threshold)
        if self.kind == "tis":
            return torch.exp(log_ratio.clamp(max=limit)) * mask, (log_ratio > limit) & (mask > 0)
        if self.kind == "mis":
            kept = log_ratio.abs() <= limit
            return kept.float() * mask, ~kept & (mask > 0)
        return mask.clone(), torch.zeros_like(mask, dtype=torch.bool)

    def apply(self, trainer: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor,
              metrics: TokenMetrics) -> torch.Tensor | None:
        """Record the mismatch metrics; the token weights to multiply the loss by, or None
        without a correction."""
        weights, corrected = self.weights(trainer, sampler, mask)
        record_mismatch(metrics, trainer, sampler, mask, weights, corrected)
        return weights if self.kind != "none" else None


def record_mismatch(metrics: TokenMetrics, trainer: torch.Tensor, sampler: torch.Tensor,
                    mask: torch.Tensor, weights: torch.Tensor, corrected: torch.Tensor) -> None:
    """Token means over the mask: the KL between sampler and trainer (k1 = o - s, and the
    k3 estimate), the mean token ratio rho, |o - s|, the share of tokens truncated or
    masked, and the weights' first two moments (for `effective_sample_size`)."""
    difference = trainer - sampler
    metrics.add("mismatch/kl", difference, mask)
    metrics.add("mismatch/k3", torch.exp(-difference) + difference - 1.0, mask)
    metrics.add("mismatch/is_ratio_mean", torch.exp(difference.clamp(-50.0, 50.0)), mask)
    metrics.add("mismatch/corrected_frac", corrected.float(), mask)
    metrics.add("mismatch/weight_mean", weights, mask)
    metrics.add("mismatch/weight_square_mean", weights.square(), mask)
    metrics.add("logprob_diff/sampler_trainer", difference.abs(), mask)


def effective_sample_size(means: dict[str, float]) -> dict[str, float]:
    """(sum w)^2 / (n sum w^2) over the tokens = mean(w)^2 / mean(w^2), from the means
    `record_mismatch` accumulated (none if it recorded nothing)."""
    if "mismatch/weight_mean" not in means:
        return {}
    return {"mismatch/ess": means["mismatch/weight_mean"] ** 2
            / max(means["mismatch/weight_square_mean"], 1e-12)}
