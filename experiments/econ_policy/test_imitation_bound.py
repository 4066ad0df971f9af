"""The nearest-neighbour student of the planner: its figures are the prompt's, its neighbours
are found in standardised figures (with the outlook only when asked), and on its own train
states with one neighbour it is the planner."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.econ_policy.headroom import month_reward_grid, sample_headroom
from experiments.econ_policy.imitation_bound import (
    StateRecord,
    gains_over_rule,
    nearest_neighbour_replies,
    state_record,
)
from src.tasks.instance.econ.outlook import market_outlook
from src.tasks.instance.econ.prompt import market_outlook_line
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.task import EconDecisionTask
from tests.tasks.econ.test_task import SMALL, first_prompt

TASK = {**SMALL, "planning_draws": 2}


def record(price: float, goods: float, change: float, work: float, share: float) -> StateRecord:
    return StateRecord(figures=np.array([price, goods, goods]), expected_price_change=change,
                       planned_work=work, planned_consumption=share, rule_work=1.0,
                       rule_consumption=0.5)


def test_the_student_of_one_neighbour_on_its_own_states_scores_the_planners_gain() -> None:
    task = EconDecisionTask(**TASK)
    samples = [task.get_sample(i) for i in task.sample_ids("validation")]
    records = [state_record(task, sample) for sample in samples]
    replies = nearest_neighbour_replies(records, records, 1, with_outlook=True)
    assert replies == [(r.planned_work, r.planned_consumption) for r in records]
    rewards = [month_reward_grid(task, sample,
                                 rule_decisions(task.sample_state(sample), task.utility))
               for sample in samples]
    for sample, gain in zip(samples, gains_over_rule(records, rewards, replies), strict=True):
        headroom = sample_headroom(task, sample)
        assert gain == pytest.approx(headroom.planned_reward - headroom.rule_reward, abs=1e-12)


def test_neighbours_are_found_in_standardised_figures() -> None:
    # the price spreads over hundreds, the goods over units: in raw figures the target's
    # nearest state is the one at its price (distance 1 + 2 * 3^2 against 29^2); in
    # standardised figures it is the one with its goods
    train = [record(100.0, 1.0, 0.0, 1.0, 0.10), record(400.0, 4.0, 0.0, 0.0, 0.90),
             record(130.0, 4.0, 0.0, 0.0, 0.50), record(300.0, 1.0, 0.0, 1.0, 0.20)]
    target = record(101.0, 4.0, 0.0, 1.0, 0.0)
    assert nearest_neighbour_replies(train, [target], 1, with_outlook=False) == [(0.0, 0.5)]


def test_the_outlook_counts_only_when_asked() -> None:
    train = [record(1.0, 1.0, -0.03, 0.0, 0.10), record(1.2, 1.2, 0.03, 1.0, 0.40),
             record(3.0, 3.0, 0.0, 1.0, 0.60)]
    target = record(1.0, 1.0, 0.03, 0.0, 0.0)  # the first state's figures, the second's move
    assert nearest_neighbour_replies(train, [target], 1, with_outlook=False) == [(0.0, 0.10)]
    assert nearest_neighbour_replies(train, [target], 1, with_outlook=True) == [(1.0, 0.40)]


def test_several_neighbours_answer_the_majority_work_and_the_median_share_on_the_grid() -> None:
    train = [record(1.0, 1.0, 0.0, 1.0, 0.10), record(1.1, 1.0, 0.0, 1.0, 0.31),
             record(1.2, 1.0, 0.0, 0.0, 0.35), record(9.0, 9.0, 0.0, 0.0, 0.90)]
    target = record(1.1, 1.0, 0.0, 0.0, 0.0)
    # the three nearest: two of three work, their median share 0.31 snaps to 0.32
    assert nearest_neighbour_replies(train, [target], 3, with_outlook=False) == [(1.0, 0.32)]
    # all four: two work of four is not most, the median (0.31 + 0.35) / 2 = 0.33 snaps to 0.32
    assert nearest_neighbour_replies(train, [target], 4, with_outlook=False) == [(0.0, 0.32)]


def test_the_students_figures_are_the_ones_its_prompt_shows() -> None:
    task = EconDecisionTask(**TASK, show_cash_on_hand=True, compact_prompt=True,
                            show_market_outlook=True)
    sample = task.get_sample("train-000005")
    student = state_record(task, sample)
    price, goods_working, goods_resting = np.exp(student.figures)
    prompt = first_prompt(task, "train-000005")
    assert f"cost ${price:,.2f} each" in prompt
    assert f"enough for {goods_working:,.0f} goods, and" in prompt
    assert f"enough for {goods_resting:,.0f} goods." in prompt
    state = task.sample_state(sample)
    outlook = market_outlook(state, rule_decisions(state, task.utility))
    assert student.expected_price_change == outlook.expected_price_change
    assert market_outlook_line(outlook) in prompt.splitlines()
