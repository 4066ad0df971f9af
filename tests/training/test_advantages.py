"""Advantage estimators (references section 1) pinned to hand values."""

from __future__ import annotations

import math

import pytest
import torch

from src.maths.groups import EPS
from src.training.advantages import ADVANTAGE_ESTIMATORS, GRPO, RLOO, DrGRPO, Reinforce, whiten

RETURNS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1])


def test_registry_names() -> None:
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "dr_grpo", "rloo", "reinforce"}


def test_grpo() -> None:
    std = math.sqrt(1 / 3)
    assert GRPO()(RETURNS, GROUPS).tolist() == pytest.approx(
        [0.5 / (std + EPS), -0.5 / (std + EPS), -0.5 / (std + EPS), 0.5 / (std + EPS), 0, 0],
        rel=1e-6)
    assert GRPO()(torch.tensor([0.7]), torch.tensor([0])).tolist() == pytest.approx([0.7])


def test_dr_grpo_and_rloo() -> None:
    assert DrGRPO()(RETURNS, GROUPS).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0, 0])
    # RLOO: 1 - mean(0, 0, 1) = 2/3; 0 - mean(1, 0, 1) = -2/3
    assert RLOO()(RETURNS, GROUPS).tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0])


@pytest.mark.parametrize("estimator", [GRPO(), DrGRPO(), RLOO(), Reinforce("group_mean")])
@pytest.mark.parametrize("value", [-0.1, -0.3, 0.1, 1.0 / 3.0])
def test_group_relative_estimators_give_exact_zero_for_equal_returns(estimator, value) -> None:
    returns = torch.full((8,), value, dtype=torch.float32)
    assert estimator(returns, torch.zeros(8, dtype=torch.long)).tolist() == [0.0] * 8


def test_reinforce_baselines() -> None:
    assert Reinforce("none")(RETURNS, GROUPS).tolist() == pytest.approx(RETURNS.tolist())
    running = Reinforce("running_mean", decay=0.5)
    first = running(RETURNS, GROUPS)  # no history yet: baseline 0, then it learns the mean
    assert first.tolist() == pytest.approx(RETURNS.tolist())
    assert running(RETURNS, GROUPS).tolist() == pytest.approx((RETURNS - 1.0).tolist())
    state = running.state_dict()
    restored = Reinforce("running_mean", decay=0.5)
    restored.load_state_dict(state)
    assert restored.running_mean == running.running_mean


def test_whitening() -> None:
    white = whiten(torch.tensor([1.0, 3.0]))
    assert white.tolist() == pytest.approx([-1 / (math.sqrt(2) + EPS), 1 / (math.sqrt(2) + EPS)])
    assert whiten(torch.full((8,), -0.1)).tolist() == [0.0] * 8
