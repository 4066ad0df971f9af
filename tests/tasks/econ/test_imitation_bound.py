"""The nearest-neighbour student of the planner: its figures are the prompt's, and on its own
train states with one neighbour it is the planner."""

from __future__ import annotations

import numpy as np
import pytest

from src.tasks.instance.econ.headroom import sample_headroom
from src.tasks.instance.econ.imitation_bound import (
    gains_over_rule,
    month_rewards,
    nearest_neighbour_replies,
    state_record,
)
from src.tasks.instance.econ.task import EconDecisionTask
from tests.tasks.econ.test_task import SMALL, first_prompt

TASK = {**SMALL, "planning_draws": 2}


@pytest.mark.parametrize("with_outlook", [False, True])
def test_with_one_neighbour_on_its_own_train_states_the_student_is_the_planner(
        with_outlook: bool) -> None:
    task = EconDecisionTask(**TASK)
    samples = [task.get_sample(i) for i in task.sample_ids("validation")]
    records = [state_record(task, sample) for sample in samples]
    replies = nearest_neighbour_replies(records, records, 1, with_outlook)
    assert replies == [(r.planned_work, r.planned_consumption) for r in records]
    rewards = [month_rewards(task, sample) for sample in samples]
    gains = gains_over_rule(records, rewards, replies)
    for sample, gain in zip(samples, gains, strict=True):
        headroom = sample_headroom(task, sample)
        assert gain == pytest.approx(headroom.planned_reward - headroom.rule_reward, abs=1e-12)
    rule_replies = [(r.rule_work, r.rule_consumption) for r in records]
    assert gains_over_rule(records, rewards, rule_replies) == [0.0] * len(records)


def test_many_neighbours_answer_the_majority_work_and_the_median_share() -> None:
    task = EconDecisionTask(**TASK)
    train = [state_record(task, task.get_sample(i)) for i in task.sample_ids("train")]
    target = state_record(task, task.get_sample("validation-000000"))
    ((work, share),) = nearest_neighbour_replies(train, [target], len(train), False)
    assert work == float(np.mean([r.planned_work for r in train]) > 0.5)
    assert share == round(float(np.median([r.planned_consumption for r in train])) * 50) / 50


def test_the_students_figures_are_the_ones_its_prompt_shows() -> None:
    task = EconDecisionTask(**TASK, show_cash_on_hand=True, compact_prompt=True,
                            show_market_outlook=True)
    record = state_record(task, task.get_sample("train-000005"))
    price, goods_working, goods_resting = np.exp(record.figures)
    prompt = first_prompt(task, "train-000005")
    assert f"cost ${price:,.2f} each" in prompt
    assert f"enough for {goods_working:,.0f} goods, and" in prompt
    assert f"enough for {goods_resting:,.0f} goods." in prompt
    change = record.expected_price_change
    assert f"{abs(change):.1%} by next month" in prompt or "expected to hold" in prompt
