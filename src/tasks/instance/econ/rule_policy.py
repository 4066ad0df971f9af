"""The rule-based household: the best propensities for the month as it expects it.

Each household maximises the value of `utility.household_value` over the 0.02 grid of
consumption propensities, for working and for not working, expecting this month's price to
hold, goods not to run short and the redistribution to repeat last month's; it works
(p_w = 1) when working is worth more. Households that the policy does not control follow
it, and the oracle answers with it.
"""

from __future__ import annotations

import numpy as np

from src.tasks.instance.econ.reply_parser import GRID_STEPS
from src.tasks.instance.econ.simulation import HOURS_PER_MONTH, Decisions, EconomyState
from src.tasks.instance.econ.tax import income_tax
from src.tasks.instance.econ.utility import UtilityParameters, household_value

# k / 50: exactly the values the parser snaps replies to
PROPENSITY_GRID = np.arange(GRID_STEPS + 1) / GRID_STEPS


def expected_cash_on_hand(state: EconomyState, works: float | np.ndarray) -> np.ndarray:
    """Each household's money for the month as the rule expects it: savings, the month's pay
    after tax when it works, and a redistribution that repeats last month's."""
    income = HOURS_PER_MONTH * works * state.wage
    return state.savings + income - income_tax(income) + state.last_redistribution


def rule_decisions(state: EconomyState, params: UtilityParameters) -> Decisions:
    best_values, best_shares = [], []
    for works in (0.0, 1.0):
        cash = expected_cash_on_hand(state, works)
        shares = PROPENSITY_GRID[None, :]
        values = household_value(shares * cash[:, None] / state.price, works,
                                 (1.0 - shares) * cash[:, None], state.price,
                                 state.last_redistribution, params)
        best = np.argmax(values, axis=1)  # ties go to the smaller share
        best_values.append(values[np.arange(state.num_households), best])
        best_shares.append(PROPENSITY_GRID[best])
    work = best_values[1] > best_values[0]
    consumption = np.where(work, best_shares[1], best_shares[0])
    work, consumption = work.astype(float), consumption.astype(float)
    work.flags.writeable = consumption.flags.writeable = False
    return Decisions(work=work, consumption=consumption)
