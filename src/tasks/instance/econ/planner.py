"""The planning household: the best grid reply in expectation over the month's luck.

The rule policy (`rule_policy`) decides as if this month's price held, goods did not run
short and the redistribution repeated. The planner knows the economy's state and its laws
(`simulation`) but not the month's draws: for every reply the parser can produce (work 0 or
1, since the reward is linear in the work propensity, and each of the 51 consumption shares)
it averages the household's reward (`reward`, the other households on the rule policy) over
other draws of the same month (`simulation.planning_draws`) and takes the best. Averaged
over the same draws, the rule's own reply is one of the candidates, so the planner is never
worse than the rule in its own expectation. Measured with the months' own draws
(`experiments.econ_policy.headroom`) it beats the rule by 0.0003 to 0.0005 on the econ
assignments' held-out sets, and it spent less than the rule on none of their states: it
prices in the moves of prices and transfers that the rule assumes away.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from src.tasks.instance.econ.reply_parser import GRID_STEPS
from src.tasks.instance.econ.reward import household_rewards
from src.tasks.instance.econ.rule_policy import PROPENSITY_GRID
from src.tasks.instance.econ.simulation import Decisions, EconomyState, MonthDraws
from src.tasks.instance.econ.utility import UtilityParameters

WORK_CHOICES = (0.0, 1.0)


def grid_rewards(state: EconomyState, draws: MonthDraws, decisions: Decisions, household: int,
                 params: UtilityParameters) -> np.ndarray:
    """The household's reward for each (work, share) reply, the others as in `decisions`:
    rows are WORK_CHOICES, columns PROPENSITY_GRID."""
    return np.array([[household_rewards(state, draws,
                                        decisions.with_decision(household, work, share),
                                        [household], params)[0]
                      for share in PROPENSITY_GRID] for work in WORK_CHOICES])


def reward_on_grid(rewards: np.ndarray, work: float, share: float) -> float:
    """The entry of a grid of rewards for the reply (work, share), both on the grid."""
    return float(rewards[int(work), int(round(share * GRID_STEPS))])


def best_grid_reply(rewards: np.ndarray) -> tuple[float, float]:
    """The (work, share) of the largest entry of a grid of rewards (ties: the first)."""
    work_index, share_index = np.unravel_index(int(np.argmax(rewards)), rewards.shape)
    return WORK_CHOICES[work_index], float(PROPENSITY_GRID[share_index])


def planned_decision(state: EconomyState, decisions: Decisions, household: int,
                     draws: Sequence[MonthDraws], params: UtilityParameters) -> tuple[float, float]:
    """The (work, share) with the best mean reward over `draws`."""
    if not draws:
        raise ValueError("planned_decision: the planner needs at least one draw of the month")
    expected = np.mean([grid_rewards(state, month, decisions, household, params)
                        for month in draws], axis=0)
    return best_grid_reply(expected)
