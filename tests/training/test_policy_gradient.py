"""Every formula of references section 1, pinned to values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from src.training.kl_control import KLController
from src.training.policy_gradient import (
    EPS,
    advantages,
    aggregate,
    kl_penalty,
    ppo_clip_loss,
    reinforce_loss,
    whiten,
    zero_spread_groups,
)

RETURNS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1])


def test_grpo_advantage() -> None:
    result = advantages(RETURNS, GROUPS, "grpo")
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    expected = [0.5 / (std + EPS), -0.5 / (std + EPS), -0.5 / (std + EPS), 0.5 / (std + EPS), 0, 0]
    assert result.tolist() == pytest.approx(expected, rel=1e-6)


def test_group_of_one_keeps_its_return() -> None:
    assert advantages(torch.tensor([0.7]), torch.tensor([0]), "grpo").tolist() == pytest.approx([0.7])


def test_dr_grpo_and_rloo() -> None:
    assert advantages(RETURNS, GROUPS, "dr_grpo").tolist() == pytest.approx(
        [0.5, -0.5, -0.5, 0.5, 0, 0])
    # RLOO: 1 - mean(0, 0, 1) = 2/3; 0 - mean(1, 0, 1) = -2/3
    assert advantages(RETURNS, GROUPS, "rloo").tolist() == pytest.approx(
        [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0])


def test_reinforce_baseline_and_whitening() -> None:
    assert advantages(RETURNS, GROUPS, "reinforce", 0.5).tolist() == pytest.approx(
        [0.5, -0.5, -0.5, 0.5, 1.5, 1.5])
    white = whiten(torch.tensor([1.0, 3.0]))
    assert white.tolist() == pytest.approx([-1 / (math.sqrt(2) + EPS), 1 / (math.sqrt(2) + EPS)])


def test_zero_spread_groups() -> None:
    assert zero_spread_groups(RETURNS, GROUPS).tolist() == [False] * 4 + [True] * 2


def test_ppo_clip_loss_pinned() -> None:
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1, 5.0]))
    advantage = torch.tensor([1.0, -1.0, -2.0, -1.0])
    result = ppo_clip_loss(logp, old, advantage, 0.2, 0.28, dual_clip=3.0)
    # r=1.5, A=1: max(-1.5, -1.28) = -1.28 (clipped high)
    # r=0.5, A=-1: max(0.5, 0.8) = 0.8 (clipped low)
    # r=1.1, A=-2: max(2.2, 2.2) = 2.2
    # r=5.0, A=-1: max(5, 1.28) = 5, dual clip min(5, 3) = 3
    assert result.per_token.tolist() == pytest.approx([-1.28, 0.8, 2.2, 3.0], rel=1e-6)
    assert result.clipped_high.tolist() == [True, False, False, False]
    assert result.clipped_low.tolist() == [False, True, False, False]


def test_ratio_one_still_has_the_policy_gradient() -> None:
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    advantage = torch.tensor([2.0, -1.0])
    ppo_clip_loss(logp, logp.detach(), advantage).per_token.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-2.0, 1.0])
    assert reinforce_loss(torch.tensor([-1.0]), torch.tensor([2.0])).tolist() == [2.0]


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", 10 / 4),
    ("seq-mean-token-mean", (2.0 + 4.0) / 2),
    ("seq-mean-token-sum", (6.0 + 4.0) / 2),
    ("seq-mean-token-sum-norm", 10 / (2 * 5)),
])
def test_loss_aggregation(mode: str, expected: float) -> None:
    assert aggregate(LOSS, MASK, mode, norm_length=5).item() == pytest.approx(expected)


def test_micro_batches_add_up_to_the_mini_batch() -> None:
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                 "seq-mean-token-sum-norm"):
        whole = aggregate(LOSS, MASK, mode, norm_length=3)
        parts = sum(aggregate(LOSS[i:i + 1], MASK[i:i + 1], mode, norm_length=3,
                              num_sequences=2, num_tokens=4.0) for i in range(2))
        assert parts.item() == pytest.approx(whole.item())


def test_kl_estimators() -> None:
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(0.5)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.125)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3").item() == 10.0


def test_kl_controllers() -> None:
    adaptive = KLController(kind="adaptive", beta=0.1, target=0.1, horizon=100)
    assert adaptive.update(kl=0.5, n_steps=10) == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))
    band = KLController(kind="band", beta=0.1, band_factor=2.0)
    assert band.update(0.2) == pytest.approx(0.2)
    assert band.update(0.05) == pytest.approx(0.2)
    assert band.update(0.001) == pytest.approx(0.1)
    assert KLController(kind="fixed", beta=0.3).update(5.0) == 0.3
