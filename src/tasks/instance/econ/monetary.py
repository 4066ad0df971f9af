"""Monetary policy: yearly interest on savings and the Taylor rule that sets the rate."""

from __future__ import annotations

import numpy as np

INITIAL_INTEREST_RATE = 0.03
NATURAL_RATE = 0.01
INFLATION_TARGET = 0.02
NATURAL_UNEMPLOYMENT = 0.04
INFLATION_WEIGHT = 0.5
UNEMPLOYMENT_WEIGHT = 0.5


def taylor_rate(inflation: float, unemployment: float) -> float:
    """r = max(r_n + pi_t + 0.5 (pi - pi_t) + 0.5 (u_n - u), 0) for the coming year."""
    rate = (NATURAL_RATE + INFLATION_TARGET
            + INFLATION_WEIGHT * (inflation - INFLATION_TARGET)
            + UNEMPLOYMENT_WEIGHT * (NATURAL_UNEMPLOYMENT - unemployment))
    return max(rate, 0.0)


def pay_interest(savings: np.ndarray, rate: float) -> np.ndarray:
    return savings * (1.0 + rate)
