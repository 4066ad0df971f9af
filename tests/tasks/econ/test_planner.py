"""The planner: the best grid reply in expectation over other draws of the month, and the
task's oracle that answers with it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from src.tasks.instance.econ.planner import (
    best_grid_reply,
    grid_rewards,
    planned_decision,
    reward_on_grid,
)
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.simulation import month_draws, planning_draws
from src.tasks.instance.econ.task import EconDecisionTask
from tests.tasks.econ.test_task import SMALL, run


def test_planning_draws_are_seeded_and_never_the_months_own() -> None:
    first = planning_draws(7, 3, 10, 4)
    again = planning_draws(7, 3, 10, 4)
    own = month_draws(7, 3, 10)
    assert len(first) == 4
    for draw, repeat in zip(first, again, strict=True):
        np.testing.assert_array_equal(draw.work, repeat.work)
        assert not np.array_equal(draw.work, own.work)
    assert not np.array_equal(first[0].work, first[1].work)


def test_planning_on_the_months_own_draws_is_the_best_reply_in_hindsight() -> None:
    task = EconDecisionTask(**SMALL)
    for sample_id in task.sample_ids("validation"):
        sample = task.get_sample(sample_id)
        household = sample.data["households"][0]
        state = task.sample_state(sample)
        rule = rule_decisions(state, task.utility)
        own = month_draws(sample.data["economy_seed"], sample.data["month"], task.num_households)
        rewards = grid_rewards(state, own, rule, household, task.utility)
        work, share = planned_decision(state, rule, household, [own], task.utility)
        reply = json.dumps({"work": work, "consumption": share})
        assert run(task, sample_id, [reply]).reward == pytest.approx(rewards.max(), abs=1e-12)
        assert best_grid_reply(rewards) == (work, share)


def test_the_planner_is_never_below_the_rule_in_its_own_expectation() -> None:
    task = EconDecisionTask(**SMALL, planning_draws=3)
    for sample_id in task.sample_ids("train")[:4]:
        sample = task.get_sample(sample_id)
        household = sample.data["households"][0]
        state = task.sample_state(sample)
        rule = rule_decisions(state, task.utility)
        draws = planning_draws(sample.data["economy_seed"], sample.data["month"],
                               task.num_households, 3)
        expected = np.mean([grid_rewards(state, d, rule, household, task.utility)
                            for d in draws], axis=0)
        work, share = task.planned_decision(sample, rule, household)
        rule_entry = reward_on_grid(expected, rule.work[household],
                                    rule.consumption[household])
        assert reward_on_grid(expected, work, share) >= rule_entry
    with pytest.raises(ValueError, match="at least one draw"):
        planned_decision(state, rule, household, [], task.utility)


def test_the_planner_oracle_answers_with_the_planned_decision() -> None:
    rule_task = EconDecisionTask(**SMALL)
    planner_task = EconDecisionTask(**SMALL, oracle_policy="planner", planning_draws=2)
    differs = 0
    for sample_id in planner_task.sample_ids("train"):
        environment = planner_task.new_episode()
        environment.reset(options={"sample_id": sample_id})
        sample = planner_task.get_sample(sample_id)
        household = sample.data["households"][0]
        rule = rule_decisions(planner_task.sample_state(sample), planner_task.utility)
        work, share = planner_task.planned_decision(sample, rule, household)
        assert json.loads(environment.oracle_reply()) == {"work": work, "consumption": share}
        rule_environment = rule_task.new_episode()
        rule_environment.reset(options={"sample_id": sample_id})
        differs += rule_environment.oracle_reply() != environment.oracle_reply()
    assert differs > 0  # the planner is not the rule under another name


def test_unknown_oracle_policy_and_no_planning_draws_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="oracle_policy must be 'rule' or 'planner'"):
        EconDecisionTask(**SMALL, oracle_policy="greedy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="planning_draws must be at least 1"):
        EconDecisionTask(**SMALL, planning_draws=0)
