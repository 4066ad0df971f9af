"""The reward follows the economics: who should work, who should spend."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from src.tasks.instance.econ.baseline_run import rule_economy_states
from src.tasks.instance.econ.reward import household_rewards
from src.tasks.instance.econ.rule_policy import PROPENSITY_GRID, rule_decisions
from src.tasks.instance.econ.simulation import EconomyState, month_draws
from src.tasks.instance.econ.utility import UtilityParameters, crra, household_value

PARAMS = UtilityParameters()
SEED, HOUSEHOLDS, MONTH = 3, 30, 30


@pytest.fixture(scope="module")
def state() -> EconomyState:
    return rule_economy_states(SEED, HOUSEHOLDS, 40, PARAMS)[MONTH]


def median_household(state: EconomyState) -> int:
    return int(np.argsort(state.wage)[HOUSEHOLDS // 2])


def with_savings(state: EconomyState, household: int, savings: float,
                 price_factor: float = 1.0) -> EconomyState:
    all_savings = state.savings.copy()
    all_savings[household] = savings
    return replace(state, savings=all_savings, price=state.price * price_factor)


def reward(state: EconomyState, household: int, work: float, consumption: float) -> float:
    decisions = rule_decisions(state, PARAMS).with_decision(household, work, consumption)
    draws = month_draws(SEED, MONTH, HOUSEHOLDS)
    return float(household_rewards(state, draws, decisions, [household], PARAMS)[0])


def test_utility_is_zero_at_nothing_and_bounded_by_one() -> None:
    assert crra(0.0, PARAMS) == 0.0
    assert crra(PARAMS.background_consumption, PARAMS) == pytest.approx(0.5)  # 1 - 1/2
    assert 0.99 < crra(1e6, PARAMS) < 1.0
    worst = household_value(0.0, 1.0, 0.0, 1.0, 0.0, PARAMS)
    assert worst == pytest.approx(-PARAMS.work_disutility / (1 + 0.96 * 12)) and worst > -1.0


def test_same_action_same_reward(state: EconomyState) -> None:
    household = median_household(state)
    assert reward(state, household, 0.7, 0.3) == reward(state, household, 0.7, 0.3)


def test_a_poor_household_facing_high_prices_prefers_work(state: EconomyState) -> None:
    household = median_household(state)
    poor = with_savings(state, household, 0.0, price_factor=3.0)
    assert reward(poor, household, 1.0, 0.5) > reward(poor, household, 0.0, 0.5)
    # expected utility is linear in the probability of working
    assert reward(poor, household, 0.5, 0.5) == pytest.approx(
        (reward(poor, household, 1.0, 0.5) + reward(poor, household, 0.0, 0.5)) / 2)


def test_a_rich_household_prefers_rest(state: EconomyState) -> None:
    household = median_household(state)
    rich = with_savings(state, household, 120 * 168 * state.wage[household])  # 10 years' pay
    assert reward(rich, household, 0.0, 0.1) > reward(rich, household, 1.0, 0.1)


def test_the_poor_spend_a_larger_share_than_the_rich(state: EconomyState) -> None:
    household = median_household(state)
    poor = with_savings(state, household, 0.0)
    rich = with_savings(state, household, 120 * 168 * state.wage[household])

    def best_share(economy: EconomyState) -> float:
        values = [reward(economy, household, 0.0, share) for share in PROPENSITY_GRID]
        return float(PROPENSITY_GRID[int(np.argmax(values))])

    poor_share, rich_share = best_share(poor), best_share(rich)
    assert poor_share > 0.8 and rich_share < 0.3  # hand to mouth versus spreading wealth
    # spending nothing is the worst choice for both: utility now is concave from zero
    assert reward(poor, household, 0.0, 0.0) < reward(poor, household, 0.0, 0.2)
    assert reward(rich, household, 0.0, 0.0) < reward(rich, household, 0.0, rich_share)
