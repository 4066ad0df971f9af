"""Group statistics: equal scores give exactly zero, whatever their value."""

from __future__ import annotations

import math

import pytest
import torch

from src.maths.groups import EPS, group_zscore, zero_spread

SCORES = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1])


def test_zscore_pinned() -> None:
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    expected = [0.5 / (std + EPS), -0.5 / (std + EPS), -0.5 / (std + EPS), 0.5 / (std + EPS), 0, 0]
    assert group_zscore(SCORES, GROUPS).tolist() == pytest.approx(expected, rel=1e-6)
    assert group_zscore(torch.tensor([0.7]), torch.tensor([0])).tolist() == pytest.approx([0.7])


def test_equal_scores_are_exactly_zero_spread_in_float32() -> None:
    """In float32, eight rewards of -0.1 used to give every member A = +0.0074 and -0.3
    gave -0.029, with the group not counted as zero-spread."""
    failures = []
    for value in torch.linspace(-1.0, 1.0, 201).tolist():
        for size in range(2, 17):
            scores = torch.full((size,), value, dtype=torch.float32)
            groups = torch.zeros(size, dtype=torch.long)
            if not (group_zscore(scores, groups) == 0).all() or not zero_spread(scores,
                                                                                 groups).all():
                failures.append((value, size))
    assert failures == []
    assert group_zscore(torch.full((8,), -0.1), torch.zeros(8, dtype=torch.long)).tolist() == [0.0] * 8


def test_zero_spread_needs_two_members() -> None:
    assert zero_spread(SCORES, GROUPS).tolist() == [False] * 4 + [True] * 2
    assert zero_spread(torch.tensor([0.5]), torch.tensor([0])).tolist() == [False]
