"""Per-token policy losses (references sections 1 and 1b): one class per loss, by name.

Notation: logp / old are per-token log-probs of the current policy and of the policy the
ratio is taken against, A the advantage broadcast over tokens ([rows, 1]), m the loss
mask. Each loss returns per-token values that the aggregation reduces, and which tokens
the clip made inactive. A new loss is one class here, registered by its name in
POLICY_LOSSES: `ppo.loss` accepts every registered name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from src.configuration.registry import RegisteredName, Registry

LOG_RATIO_LIMIT = 20.0


@dataclass
class PolicyLoss:
    per_token: torch.Tensor  # [rows, length]
    clipped_low: torch.Tensor  # bool: ratio < 1 - eps_low with A < 0 (clip active)
    clipped_high: torch.Tensor  # bool: ratio > 1 + eps_high with A > 0 (clip active)


@dataclass(frozen=True)
class ClipRange:
    low: float = 0.2
    high: float = 0.2
    dual_clip: float | None = 3.0


def _clipped_surrogate(ratio: torch.Tensor, advantage: torch.Tensor, clip: ClipRange
                       ) -> PolicyLoss:
    """L = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)); for A < 0 also L = min(L, -A c)."""
    unclipped = -advantage * ratio
    clipped = -advantage * torch.clamp(ratio, 1.0 - clip.low, 1.0 + clip.high)
    loss = torch.maximum(unclipped, clipped)
    if clip.dual_clip is not None:
        loss = torch.where(advantage < 0, torch.minimum(loss, -advantage * clip.dual_clip),
                           loss)
    return PolicyLoss(per_token=loss,
                      clipped_low=(ratio < 1.0 - clip.low) & (advantage < 0),
                      clipped_high=(ratio > 1.0 + clip.high) & (advantage > 0))


class PolicyLossFunction:
    def __init__(self, clip: ClipRange | None = None) -> None:
        self.clip = clip or ClipRange()

    def __call__(self, logp: torch.Tensor, old: torch.Tensor, advantage: torch.Tensor,
                 mask: torch.Tensor) -> PolicyLoss:
        raise NotImplementedError


POLICY_LOSSES: Registry[type[PolicyLossFunction]] = Registry("policy loss")
PolicyLossName = Annotated[str, RegisteredName(POLICY_LOSSES)]


@POLICY_LOSSES.register("ppo_clip")
class PPOClip(PolicyLossFunction):
    """Token ratio r_t = exp(clamp(logp_t - old_t, -20, 20)) in the clipped surrogate. With
    one update per batch r = 1, but the gradient is the policy gradient, not zero."""

    def __call__(self, logp: torch.Tensor, old: torch.Tensor, advantage: torch.Tensor,
                 mask: torch.Tensor) -> PolicyLoss:
        ratio = torch.exp(torch.clamp(logp - old, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
        return _clipped_surrogate(ratio, advantage, self.clip)


@POLICY_LOSSES.register("reinforce")
class PolicyGradient(PolicyLossFunction):
    """L_t = -A logp_t: the plain policy gradient, no ratio."""

    def __call__(self, logp: torch.Tensor, old: torch.Tensor, advantage: torch.Tensor,
                 mask: torch.Tensor) -> PolicyLoss:
        never = torch.zeros_like(logp, dtype=torch.bool)
        return PolicyLoss(per_token=-advantage * logp, clipped_low=never, clipped_high=never)


@POLICY_LOSSES.register("gspo")
class GSPO(PolicyLossFunction):
    """GSPO (arXiv 2507.18071), its token form: s_i = exp(mean over i's masked tokens of
    (logp - old)); each token's ratio is sg[s_i] * pi_t / sg[pi_t], so every token of a
    sequence carries the sequence's value and clip decision and the gradient of its own
    log-prob. Aggregated with seq-mean-token-mean this is the paper's sequence loss
    -(1/G) sum_i min(s_i A_i, clip(s_i, 1-eps_l, 1+eps_h) A_i). The paper's clip range
    is eps_l = 3e-4, eps_h = 4e-4; without off-policy data (one update per batch) it
    equals GRPO."""

    def __call__(self, logp: torch.Tensor, old: torch.Tensor, advantage: torch.Tensor,
                 mask: torch.Tensor) -> PolicyLoss:
        log_ratio = ((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        sequence_ratio = torch.exp(torch.clamp(log_ratio, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
        ratio = sequence_ratio.detach()[:, None] * torch.exp(logp - logp.detach())
        return _clipped_surrogate(ratio, advantage, self.clip)
