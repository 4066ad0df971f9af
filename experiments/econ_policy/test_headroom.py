"""The rule policy's headroom: the best grid reply in hindsight and the planner's, checked
through the episode."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from experiments.econ_policy.headroom import sample_headroom, task_from_config
from src.tasks.instance.econ.reply_parser import Decision
from src.tasks.instance.econ.task import EconDecisionTask
from tests.tasks.econ.test_task import SMALL, run


def test_the_best_reply_scores_its_reward_through_the_episode_and_is_at_least_the_rule() -> None:
    task = EconDecisionTask(**SMALL)
    for sample_id in task.sample_ids("validation"):
        headroom = sample_headroom(task, task.get_sample(sample_id))
        assert headroom.best_reward >= headroom.rule_reward  # the rule's reply is on the grid
        reply = Decision(work=headroom.best_work,
                         consumption=headroom.best_consumption).to_json()
        episode = run(task, sample_id, [reply])
        assert episode.reward == pytest.approx(headroom.best_reward, abs=1e-12)
        assert episode.metrics["reward_vs_rule"] == pytest.approx(
            headroom.best_reward - headroom.rule_reward, abs=1e-12)
        rule_reply = Decision(work=headroom.rule_work,
                              consumption=headroom.rule_consumption).to_json()
        rule_episode = run(task, sample_id, [rule_reply])
        assert rule_episode.metrics["reward_vs_rule"] == pytest.approx(0.0, abs=1e-12)


def test_one_step_up_is_the_rules_work_with_its_share_raised_by_a_grid_step() -> None:
    task = EconDecisionTask(**SMALL)
    for sample_id in task.sample_ids("validation"):
        headroom = sample_headroom(task, task.get_sample(sample_id))
        share = min(1.0, round(headroom.rule_consumption + 0.02, 2))
        reply = Decision(work=headroom.rule_work, consumption=share).to_json()
        assert run(task, sample_id, [reply]).reward == pytest.approx(
            headroom.one_step_up_reward, abs=1e-12)
        assert headroom.one_step_up_reward <= headroom.best_reward


def test_the_planners_reward_is_its_replys_through_the_episode() -> None:
    task = EconDecisionTask(**SMALL, planning_draws=2)
    for sample_id in task.sample_ids("validation"):
        headroom = sample_headroom(task, task.get_sample(sample_id))
        reply = Decision(work=headroom.planned_work,
                         consumption=headroom.planned_consumption).to_json()
        assert run(task, sample_id, [reply]).reward == pytest.approx(
            headroom.planned_reward, abs=1e-12)
        assert headroom.planned_reward <= headroom.best_reward


def test_several_households_a_sample_are_refused_by_name() -> None:
    task = EconDecisionTask(**SMALL, households_per_sample=2)
    sample_id = task.sample_ids("train")[0]
    with pytest.raises(ValueError, match=f"{sample_id}.*asks for 2"):
        sample_headroom(task, task.get_sample(sample_id))


def test_the_task_comes_from_either_kind_of_config(tmp_path: Path) -> None:
    for section in ("assignment_config", "supervised_training_config"):
        path = tmp_path / f"{section}.yaml"
        path.write_text(yaml.safe_dump({section: {
            "output_dir": "x", "task": {"name": "econ_decision", "parameters": SMALL}}}))
        assert task_from_config(path).num_households == SMALL["num_households"]
    path = tmp_path / "math.yaml"
    path.write_text(yaml.safe_dump({"assignment_config": {"task": {"name": "math"}}}))
    with pytest.raises(ValueError, match="econ_decision"):
        task_from_config(path)
