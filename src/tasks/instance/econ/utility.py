"""A household's value of one month: CRRA utility of goods, disutility of work, value of savings.

u(x) = ((1 + x / c0)^(1 - gamma) - 1) / (1 - gamma) is CRRA in x + c0, where c0 goods a month
come from outside the market (home production, family), so u(0) = 0 and, with gamma > 1,
u < 1 / (gamma - 1): the value is bounded, which keeps a format failure (-1.0) the worst
reward. Savings s left at the month's end, with next month's price P' and this month's
redistribution R, finance H more months of y = R / P' + s / (H P') goods each:

    V = [u(c) - psi * l + beta * H * u(R / P' + s / (H P'))] / (1 + beta * H)

(divided by the total weight so that V is an average utility per month).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class UtilityParameters(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    risk_aversion: float = Field(default=2.0, gt=1.0)  # gamma > 1 keeps u bounded above
    background_consumption: float = Field(default=20.0, gt=0.0)  # c0, goods a month
    # psi, in one month's utility: 0.02 keeps the rule economy's unemployment near 7%
    work_disutility: float = Field(default=0.02, ge=0.0)
    savings_horizon_months: int = Field(default=12, ge=1)  # H
    discount: float = Field(default=0.96, gt=0.0, le=1.0)  # beta, on the later months


def crra(goods: np.ndarray | float, params: UtilityParameters) -> np.ndarray | float:
    gamma = params.risk_aversion
    shifted = 1.0 + np.asarray(goods, dtype=float) / params.background_consumption
    return (1.0 - shifted ** (1.0 - gamma)) / (gamma - 1.0)


def household_value(goods: np.ndarray | float, worked: np.ndarray | float,
                    savings: np.ndarray | float, next_price: float, redistribution: float,
                    params: UtilityParameters) -> np.ndarray | float:
    """V above, for goods consumed, l (0 or 1) and end-of-month savings ($)."""
    horizon = params.savings_horizon_months
    later_goods = (redistribution + np.asarray(savings, dtype=float) / horizon) / next_price
    weight = params.discount * horizon
    return ((crra(goods, params) - params.work_disutility * np.asarray(worked, dtype=float)
             + weight * crra(later_goods, params)) / (1.0 + weight))
