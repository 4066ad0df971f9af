"""The market outlook: the price move the month's plans imply, checked against the month
the simulation steps, and its line in the prompts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from src.tasks.instance.econ.outlook import MarketOutlook, market_outlook
from src.tasks.instance.econ.prompt import market_outlook_line
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.simulation import (
    HOURS_PER_MONTH,
    PRODUCTIVITY,
    Decisions,
    MonthDraws,
    step_month,
)
from src.tasks.instance.econ.task import EconDecisionTask
from src.tasks.instance.econ.tax import income_tax, redistribute
from tests.tasks.econ.test_task import SMALL, first_prompt


def test_the_expected_price_move_is_the_simulated_one_at_the_mean_draw() -> None:
    """With everyone working and the redistribution what their taxes make, the money each
    household expects is the money it has, so the outlook's move is the month's own at the
    price draw's mean (0.5)."""
    task = EconDecisionTask(**SMALL)
    state = task.sample_state(task.get_sample("train-000002"))
    rule = rule_decisions(state, task.utility)
    everyone_works = Decisions(work=np.ones(state.num_households), consumption=rule.consumption)
    income = HOURS_PER_MONTH * state.wage
    state = dataclasses.replace(state,
                                last_redistribution=float(redistribute(income_tax(income))[0]))
    outlook = market_outlook(state, everyone_works)
    draws = MonthDraws(work=np.zeros(state.num_households),
                       wage=np.zeros(state.num_households), price=0.5)
    month = step_month(state, np.ones(state.num_households, dtype=bool), rule.consumption, draws)
    assert outlook.expected_price_change == pytest.approx(month.state.price / state.price - 1.0,
                                                          rel=1e-9)
    assert outlook.expected_price_change != 0.0
    assert outlook.goods_on_sale == pytest.approx(
        state.inventory + PRODUCTIVITY * HOURS_PER_MONTH * state.num_households)
    bought = float(month.goods.sum())  # the purchases, or all the goods when they run short
    assert bought == pytest.approx(min(outlook.planned_purchases, outlook.goods_on_sale), rel=1e-9)


def test_no_purchases_planned_means_the_largest_expected_fall() -> None:
    task = EconDecisionTask(**SMALL)
    state = dataclasses.replace(task.sample_state(task.get_sample("train-000001")),
                                inventory=500.0)
    nobody_buys = Decisions(work=np.zeros(state.num_households),
                            consumption=np.zeros(state.num_households))
    outlook = market_outlook(state, nobody_buys)
    assert outlook.planned_purchases == 0.0
    assert outlook.goods_on_sale == 500.0
    assert outlook.expected_price_change == pytest.approx(-0.05)  # half the 10% largest move


def test_the_prompts_state_the_outlook_only_when_asked() -> None:
    plain = EconDecisionTask(**SMALL, show_cash_on_hand=True, compact_prompt=True)
    for options in ({"compact_prompt": True}, {}):
        task = EconDecisionTask(**SMALL, show_cash_on_hand=True, show_market_outlook=True,
                                **options)
        state = task.sample_state(task.get_sample("train-000004"))
        line = market_outlook_line(market_outlook(state, rule_decisions(state, task.utility)))
        prompt = first_prompt(task, "train-000004")
        assert line in prompt.splitlines()
        assert prompt.replace(line + "\n", "") == first_prompt(
            EconDecisionTask(**SMALL, show_cash_on_hand=True, **options), "train-000004")
    assert "shops" not in first_prompt(plain, "train-000004")


@pytest.mark.parametrize(("change", "words"), [(0.0123, "to rise by about 1.2%"),
                                               (-0.0391, "to fall by about 3.9%"),
                                               (0.0005, "to rise by about 0.1%"),
                                               (-0.0005, "to fall by about 0.1%"),
                                               (0.0004, "to hold"), (-0.0004, "to hold"),
                                               (0.0, "to hold")])
def test_the_outlook_line_words_the_move(change: float, words: str) -> None:
    line = market_outlook_line(MarketOutlook(goods_on_sale=1234.4, planned_purchases=1500.6,
                                             expected_price_change=change))
    assert line == (f"This month the shops will have about 1,234 goods and households plan to "
                    f"buy about 1,501, so the price is expected {words} by next month.")
