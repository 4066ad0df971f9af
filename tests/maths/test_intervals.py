"""The bootstrap interval of a mean."""

from __future__ import annotations

import statistics

import pytest

from src.maths.intervals import mean_with_interval


def test_the_interval_is_the_bootstrap_of_the_mean_and_holds_it() -> None:
    values = [1.0] * 38 + [-1.0] * 11 + [0.0] * 127
    interval = mean_with_interval(values)
    assert interval.mean == statistics.fmean(values)
    # the normal approximation's half width is 1.96 * 0.038; the bootstrap's is near it
    assert interval.low < interval.mean < interval.high
    assert interval.high - interval.low == pytest.approx(2 * 1.96 * 0.0381, rel=0.05)
    assert mean_with_interval(values) == interval  # a fixed seed: the same figures again
    assert str(mean_with_interval([0.5, 0.5])) == "+0.5 [+0.5, +0.5]"


def test_fewer_than_two_values_have_no_interval() -> None:
    with pytest.raises(ValueError, match="at least 2 values, got 1"):
        mean_with_interval([0.3])
