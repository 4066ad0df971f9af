"""Offline group training maths (references section 1: RCE warm-up, curriculum, GRPO).

Notation: a group g holds candidates y_1..y_G of one prompt with scores s_1..s_G, fixed
before training (no sampling happens). Per-token log-probs logp and the loss mask m are
[rows, length] tensors as returned by `TrainableLanguageModel.score`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from src.maths.groups import group_zscore

ADVANTAGE_CLIP = 5.0


def group_advantages(scores: torch.Tensor, group_ids: torch.Tensor,
                     clip: float = ADVANTAGE_CLIP) -> torch.Tensor:
    """A_i = clip((s_i - mean_g) / (std_g + eps), -clip, clip): GRPO's z-score per group."""
    return group_zscore(scores, group_ids).clamp(-clip, clip)


def softmax_weights(scores: torch.Tensor, tau: float) -> torch.Tensor:
    """w_i = exp(s_i / tau) / sum_j exp(s_j / tau) over the scores of one group."""
    return torch.softmax(scores / tau, dim=-1)


def rce_tau(step: int, total_steps: int, start: float = 2.0, end: float = 0.5) -> float:
    """tau linear from `start` at step 0 to `end` at step total_steps - 1 (a warm-up of
    one step uses `start`): early steps spread the weight over all candidates, late steps
    concentrate it on the best."""
    if total_steps <= 1:
        return start
    return start + (end - start) * step / (total_steps - 1)


def curriculum_candidates(scores: Sequence[float], epoch: int, top_k: int = 3,
                          top_k_epochs: int = 1) -> list[int]:
    """Indices (ascending) of the candidates GRPO epoch `epoch` (0-based) trains on: the
    `top_k` best by score while epoch < top_k_epochs, every candidate afterwards. Ties go
    to the earlier candidate."""
    everyone = list(range(len(scores)))
    if epoch >= top_k_epochs:
        return everyone
    best_first = sorted(everyone, key=lambda index: (-scores[index], index))
    return sorted(best_first[:top_k])


def best_minus_worst(mean_token_logp: Sequence[float], scores: Sequence[float]) -> float | None:
    """Mean per-token log-likelihood of the group's best-scored candidates minus that of its
    worst-scored ones. Candidates tied at the top (or bottom) score are averaged, since
    with coarse rewards (correct / wrong) the choice among them would be arbitrary. None
    when all scores are equal: such a group has no best or worst."""
    high, low = max(scores), min(scores)
    if high == low:
        return None
    best = [value for value, score in zip(mean_token_logp, scores, strict=True) if score == high]
    worst = [value for value, score in zip(mean_token_logp, scores, strict=True) if score == low]
    return sum(best) / len(best) - sum(worst) / len(worst)
