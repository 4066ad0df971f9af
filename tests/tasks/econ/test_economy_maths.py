"""Tax, redistribution, goods market, wage and price moves and the Taylor rule, by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from src.tasks.instance.econ.market import adjust_level, clear_goods_market, imbalance
from src.tasks.instance.econ.monetary import pay_interest, taylor_rate
from src.tasks.instance.econ.population import sample_population
from src.tasks.instance.econ.simulation import (
    MonthDraws,
    initial_state,
    month_draws,
    step_month,
)
from src.tasks.instance.econ.tax import income_tax, redistribute


def test_income_tax_applies_each_rate_within_its_bracket() -> None:
    incomes = np.array([0.0, 500.0, 808.33, 2000.0, 5000.0, 50000.0])
    first = 0.10 * 808.33
    second = first + 0.12 * (3289.58 - 808.33)
    below_42525 = (second + 0.22 * (7016.67 - 3289.58) + 0.24 * (13393.75 - 7016.67)
                   + 0.32 * (17008.33 - 13393.75) + 0.35 * (42525 - 17008.33))
    expected = [0.0, 50.0, first, first + 0.12 * (2000 - 808.33),
                second + 0.22 * (5000 - 3289.58), below_42525 + 0.37 * (50000 - 42525)]
    assert income_tax(incomes) == pytest.approx(expected)
    assert income_tax(np.array([50000.0]))[0] == pytest.approx(15582.2921, abs=1e-3)


def test_redistribution_shares_all_tax_equally() -> None:
    taxes = income_tax(np.array([0.0, 1680.0, 14000.0, 90000.0]))
    transfers = redistribute(taxes)
    assert transfers.sum() == pytest.approx(taxes.sum())
    assert np.all(transfers == transfers[0])


def test_market_serves_all_demand_when_goods_suffice() -> None:
    market = clear_goods_market(np.array([3.0, 5.0]), inventory=10.0)
    assert market.bought.tolist() == [3.0, 5.0]
    assert market.imbalance == pytest.approx((8 - 10) / 10)


def test_market_rations_in_proportion_when_goods_are_short() -> None:
    market = clear_goods_market(np.array([30.0, 10.0]), inventory=20.0)
    assert market.bought.tolist() == [15.0, 5.0]
    assert market.imbalance == pytest.approx(0.5)
    assert imbalance(0.0, 0.0) == 0.0


def test_adjustment_is_a_uniform_share_of_the_largest_move_signed_by_phi() -> None:
    assert adjust_level(100.0, 0.5, 0.10, 0.4) == pytest.approx(102.0)
    assert adjust_level(100.0, 0.5, 0.10, -0.4) == pytest.approx(98.0)
    assert adjust_level(np.array([10.0, 20.0]), np.array([1.0, 0.0]), 0.05, 1.0) == (
        pytest.approx([10.5, 20.0]))


def test_one_month_by_hand() -> None:
    state = initial_state(np.array([10.0, 20.0]))
    assert state.price == 15.0 and state.interest_rate == 0.03  # the mean wage, 3%
    state = replace(state, savings=np.array([100.0, 0.0]))
    draws = MonthDraws(work=np.array([0.0, 0.0]), wage=np.array([0.5, 1.0]), price=0.5)
    outcome = step_month(state, np.array([True, False]), np.array([0.5, 1.0]), draws)

    tax = 0.10 * 808.33 + 0.12 * (1680 - 808.33)
    transfer = tax / 2
    cash = np.array([100 + 1680 - tax + transfer, transfer])
    demand = np.array([0.5, 1.0]) * cash / 15.0
    phi = (demand.sum() - 168.0) / 168.0  # 168 goods made, none on hand before
    new = outcome.state
    assert outcome.goods == pytest.approx(demand)
    assert new.savings == pytest.approx(cash - demand * 15.0)
    assert new.last_tax == pytest.approx([tax, 0.0])
    assert new.last_redistribution == pytest.approx(transfer)
    assert new.inventory == pytest.approx(168.0 - demand.sum())
    assert new.wage == pytest.approx([10 * (1 + 0.5 * 0.05 * phi), 20 * (1 + 1.0 * 0.05 * phi)])
    assert new.price == pytest.approx(15 * (1 + 0.5 * 0.10 * phi))
    assert new.interest_rate == 0.03 and outcome.year is None


def test_taylor_rule_by_hand_and_its_floor() -> None:
    assert taylor_rate(0.05, 0.06) == pytest.approx(0.01 + 0.02 + 0.5 * 0.03 + 0.5 * -0.02)
    assert taylor_rate(0.02, 0.04) == pytest.approx(0.03)
    assert taylor_rate(-0.10, 0.20) == 0.0
    assert pay_interest(np.array([100.0]), 0.03) == pytest.approx([103.0])


def test_year_end_pays_interest_and_sets_next_years_rate() -> None:
    skills = sample_population(7, 20).skills
    state = initial_state(skills)
    work, consumption = np.full(20, 0.9), np.full(20, 0.6)
    for month in range(12):
        draws = month_draws(7, month, 20)
        before = state
        outcome = step_month(state, draws.work < work, consumption, draws)
        state = outcome.state
        if month < 11:
            assert outcome.year is None and state.interest_rate == 0.03
    record = outcome.year
    assert record is not None and record.year == 1 and record.gdp_growth is None
    assert record.interest_rate == 0.03
    assert record.next_interest_rate == taylor_rate(record.inflation, record.unemployment)
    assert state.interest_rate == record.next_interest_rate
    assert record.inflation == pytest.approx(record.mean_price / skills.mean() - 1)
    # the last month's savings, stepped again without the year's end, times 1.03
    unpaid = step_month(replace(before, month=10),
                        draws.work < work, consumption, draws).state.savings
    assert state.savings == pytest.approx(unpaid * 1.03)
