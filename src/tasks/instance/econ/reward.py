"""The reward of a household's decision: its expected value of the month it chose.

For household h with propensities (p_w, p_c), the month is stepped from the sample's state
with the month's own draws (from the economy seed and the month, so every completion of a
group meets the same month), the other households on the rule policy, twice: once with h
working (l = 1) and once not (l = 0). Each branch gives h's goods c_l, its savings s_l at
the month's end (with interest at a year's end), the next price P' and the redistribution
R_l, valued by `utility.household_value`:

    V_l = [u(c_l) - psi * l + beta * H * u(R_l / P' + s_l / (H P'))] / (1 + beta * H)
    reward = p_w * V_1 + (1 - p_w) * V_0,   u(x) = ((1 + x/c0)^(1 - gamma) - 1) / (1 - gamma)

Why: p_w is the probability of working, so the household's expected utility is linear in
it; taking the expectation over h's own labour draw instead of one draw removes noise that
says nothing about the decision, while rationing, taxes and price moves stay as simulated.
Consumption trades concave utility now against the utility the savings finance over the
next H months, so the best share is high for a household living on transfers and low for a
rich one; work trades the disutility psi against the marginal utility of the pay, so poor,
high-wage or high-price households work and rich ones rest. Rewards lie in
(-psi / (1 + beta H), 1 / (gamma - 1)), above the -1.0 of a format failure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from src.tasks.instance.econ.simulation import (
    Decisions,
    EconomyState,
    MonthDraws,
    realise_labour,
    step_month,
)
from src.tasks.instance.econ.utility import UtilityParameters, household_value


def household_rewards(state: EconomyState, draws: MonthDraws, decisions: Decisions,
                      households: Sequence[int], params: UtilityParameters) -> np.ndarray:
    """The reward of each household in `households` for the month under `decisions`."""
    worked = realise_labour(decisions.work, draws)
    rewards = []
    for household in households:
        branch_values = []
        for works in (False, True):
            labour = worked.copy()
            labour[household] = works
            outcome = step_month(state, labour, decisions.consumption, draws)
            branch_values.append(float(household_value(
                outcome.goods[household], float(works), outcome.state.savings[household],
                outcome.state.price, outcome.state.last_redistribution, params)))
        work = float(decisions.work[household])
        rewards.append(work * branch_values[1] + (1.0 - work) * branch_values[0])
    return np.array(rewards)
