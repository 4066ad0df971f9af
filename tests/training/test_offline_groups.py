"""The offline group maths (references section 1, RCE warm-up), pinned to hand-computed values."""

from __future__ import annotations

import pytest
import torch

from src.language_models.language_model import ScoredTokens, TokenBatch
from src.maths.groups import EPS
from src.offline_training.config import GRPOConfig
from src.offline_training.trainer import MARGIN, best_rule
from src.run.protocol import improves
from src.training.kl_control import KLController
from src.training.objectives import CrossEntropyObjective, MiniBatchTotals
from src.training.offline_groups import (
    best_minus_worst,
    curriculum_candidates,
    group_advantages,
    rce_tau,
    softmax_weights,
)
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows


def test_softmax_weights_at_the_warmup_temperatures() -> None:
    scores = torch.tensor([1.0, 2.0, 3.0])
    # tau 2: e^0.5, e^1, e^1.5 = 1.648721, 2.718282, 4.481689 over their sum 8.848692
    assert softmax_weights(scores, 2.0).tolist() == pytest.approx(
        [0.186324, 0.307196, 0.506480], abs=1e-6)
    # tau 0.5: e^2, e^4, e^6 = 7.389056, 54.598150, 403.428793 over 465.415999
    assert softmax_weights(scores, 0.5).tolist() == pytest.approx(
        [0.015876, 0.117310, 0.866813], abs=1e-6)


def test_tau_runs_linearly_from_2_to_half() -> None:
    assert rce_tau(0, 5) == 2.0
    assert rce_tau(2, 5) == pytest.approx(1.25)
    assert rce_tau(4, 5) == pytest.approx(0.5)
    assert rce_tau(1, 4) == pytest.approx(1.5)
    assert rce_tau(0, 1) == 2.0  # a single warm-up step uses the start


def test_curriculum_top_three_then_everyone() -> None:
    scores = [0.1, 1.0, 0.0, 1.0, 0.5]
    assert curriculum_candidates(scores, epoch=0, top_k=3, top_k_epochs=2) == [1, 3, 4]
    assert curriculum_candidates(scores, epoch=1, top_k=3, top_k_epochs=2) == [1, 3, 4]
    assert curriculum_candidates(scores, epoch=2, top_k=3, top_k_epochs=2) == [0, 1, 2, 3, 4]
    assert curriculum_candidates(scores, epoch=0, top_k=3, top_k_epochs=0) == [0, 1, 2, 3, 4]
    # ties go to the earlier candidate
    assert curriculum_candidates([1.0, 1.0, 1.0, 1.0], epoch=0) == [0, 1, 2]


def test_kl_band_rule_with_the_offline_defaults() -> None:
    grpo = GRPOConfig()
    assert (grpo.kl_band_low, grpo.kl_band_high, grpo.kl_band_factor) == (0.01, 0.1, 1.5)
    band = KLController(kind="band", beta=0.04, band_low=grpo.kl_band_low,
                        band_high=grpo.kl_band_high, band_factor=grpo.kl_band_factor)
    assert band.update(0.2) == pytest.approx(0.06)  # above the band: raise
    assert band.update(0.05) == pytest.approx(0.06)  # inside: keep
    assert band.update(0.005) == pytest.approx(0.04)  # below: lower


def test_group_z_score_and_clip() -> None:
    # group 0: mean 0.25, unbiased std 0.5 -> 1.5, -0.5, -0.5, -0.5
    # group 1: one 1 among 40 -> z = 0.975 / 0.158114 = 6.1664, clipped to 5
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0] + [0.0] * 39)
    groups = torch.tensor([0] * 4 + [1] * 40)
    result = group_advantages(scores, groups)
    assert result[:4].tolist() == pytest.approx(
        [0.75 / (0.5 + EPS), -0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS)])
    assert result[4].item() == pytest.approx(5.0)
    assert result[5:].tolist() == pytest.approx([-0.158114] * 39, abs=1e-5)
    assert group_advantages(scores, groups, clip=1.0)[0].item() == pytest.approx(1.0)


def _rce(logp: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
         num_groups: int, total_tokens: float) -> float:
    """The RCE warm-up loss as the offline trainer asks the training core for it."""
    rows = TokenRows(TokenBatch(torch.zeros_like(mask, dtype=torch.long),
                                torch.ones_like(mask, dtype=torch.long), mask),
                     row_weights=weights)
    objective = CrossEntropyObjective("seq-mean-token-sum", num_sequences=num_groups)
    totals = MiniBatchTotals(num_sequences=3, num_tokens=total_tokens, longest_completion=2)
    return objective(rows, ScoredTokens(logp, None), totals, TokenMetrics()).item()


def test_rce_loss_weights_sequence_cross_entropy_and_averages_groups() -> None:
    logp = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, 0.0], [0.0, -3.0, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    weights = torch.tensor([0.25, 0.75, 1.0])  # rows 0, 1 form a group; row 2 another
    # CE = 3, 0.5, 4 -> group 0: 0.25*3 + 0.75*0.5 = 1.125; group 1: 4; mean 2.5625
    assert _rce(logp, mask, weights, 2, 5.0) == pytest.approx(2.5625)
    # micro-batches add up to the mini-batch's loss
    parts = (_rce(logp[:2], mask[:2], weights[:2], 2, 5.0)
             + _rce(logp[2:], mask[2:], weights[2:], 2, 5.0))
    assert parts == pytest.approx(2.5625)


def test_best_minus_worst_margin() -> None:
    assert best_minus_worst([-1.0, -2.0, -3.0], [1.0, 0.1, 0.0]) == pytest.approx(2.0)
    # tied best candidates are averaged: (-1 + -3) / 2 - (-2)
    assert best_minus_worst([-1.0, -2.0, -3.0], [1.0, 0.0, 1.0]) == pytest.approx(0.0)
    assert best_minus_worst([-1.0, -2.0], [0.5, 0.5]) is None


def test_best_checkpoint_rule() -> None:
    def is_new_best(best: float | None, margin: float | None, kl: float) -> bool:
        return improves(best_rule(0.1).value({MARGIN: margin, "kl": kl}), best)

    assert is_new_best(None, margin=0.1, kl=0.05)
    assert not is_new_best(None, margin=0.1, kl=0.2)  # KL outside the band
    assert not is_new_best(None, margin=None, kl=0.0)
    assert is_new_best(0.3, margin=0.4, kl=0.09)
    assert not is_new_best(0.3, margin=0.3, kl=0.01)  # ties keep the earlier
    assert not is_new_best(0.3, margin=0.9, kl=0.11)
