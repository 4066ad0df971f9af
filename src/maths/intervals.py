"""A mean with its 95% percentile bootstrap interval (10,000 resamples, a fixed seed); a
success rate with its 95% Wilson interval."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest, bootstrap

RESAMPLES = 10_000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class MeanInterval:
    mean: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.mean:+.4g} [{self.low:+.4g}, {self.high:+.4g}]"


def mean_with_interval(values: list[float], seed: int = 0) -> MeanInterval:
    """The mean and its percentile bootstrap interval (the values resampled with replacement)."""
    if len(values) < 2:
        raise ValueError(f"an interval needs at least 2 values, got {len(values)}")
    if len(set(values)) == 1:  # every resample has the same mean
        return MeanInterval(values[0], values[0], values[0])
    result = bootstrap((np.asarray(values),), np.mean, n_resamples=RESAMPLES,
                       confidence_level=CONFIDENCE, method="percentile",
                       rng=np.random.default_rng(seed))
    interval = result.confidence_interval
    return MeanInterval(statistics.fmean(values), float(interval.low), float(interval.high))


def success_with_interval(successes: int, trials: int) -> str:
    """`p% [low, high] (k/n)`: the 95% Wilson interval of a success rate."""
    interval = binomtest(successes, trials).proportion_ci(confidence_level=CONFIDENCE,
                                                          method="wilson")
    return (f"{100 * successes / trials:.1f}% [{100 * interval.low:.1f}, "
            f"{100 * interval.high:.1f}] ({successes}/{trials})")
