"""The econ decision table, computed from evaluation episodes."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import yaml

from experiments.econ_policy.decision_table import (
    DecisionBesideRule,
    decision_statistics,
    decision_table,
    decisions_beside_rule,
    rule_agreement,
    work_choice_split,
)
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.task import EconDecisionTask
from tests.tasks.econ.test_task import SMALL


def episode(reward: float, work: float | None = None, consumption: float = 0.0,
            vs_rule: float = 0.0) -> dict:
    parsed = work is not None
    metrics = {"json_parse_success": float(parsed)}
    info: dict = {}
    if parsed:
        info["econ/decisions"] = [{"household": 0, "work": work, "consumption": consumption}]
        metrics["reward_vs_rule"] = vs_rule
    return {"reward": reward, "metrics": metrics, "info": info}


def test_statistics_by_hand() -> None:
    stats = decision_statistics([episode(0.5, 1.0, 0.2, -0.1), episode(0.7, 0.0, 0.4, 0.05),
                                 episode(-1.0), episode(-1.0)])
    assert stats["JSON parse success"] == 0.5
    assert stats["share of reward -1.0"] == 0.5
    assert stats["std of work"] == pytest.approx(0.70711, abs=1e-5)  # stdev of (1, 0)
    assert stats["std of consumption"] == pytest.approx(0.14142, abs=1e-5)
    assert stats["mean reward"] == pytest.approx(-0.2)
    assert stats["mean reward (parsed)"] == pytest.approx(0.6)
    assert stats["rule policy (same states)"] == pytest.approx((0.6 + 0.65) / 2)


def test_table_compares_first_and_last_evaluation(tmp_path: Path) -> None:
    folder = tmp_path / "evaluation"
    folder.mkdir()
    for step, rows in ((0, [episode(-1.0), episode(0.5, 1.0, 0.5)]),
                       (20, [episode(-1.0), episode(-1.0)]),
                       (40, [episode(0.6, 1.0, 0.4), episode(0.8, 0.0, 0.6)])):
        (folder / f"step-{step:06d}.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows))
    lines = decision_table(tmp_path).splitlines()
    assert lines[2].startswith("| first: step-000000, 2 episodes | 0.500 | 0.500 |")
    assert lines[3].startswith("| last: step-000040, 2 episodes | 1.000 | 0.000 |")
    assert len(lines) == 4
    every = decision_table(tmp_path, every=True).splitlines()
    assert [line.split(",")[0] for line in every[2:]] == [
        "| step-000000", "| step-000020", "| step-000040"]
    assert every[3].startswith("| step-000020, 2 episodes | 0.000 | 1.000 |")
    with pytest.raises(FileNotFoundError, match="holds no evaluation"):
        decision_table(tmp_path / "none")


def test_an_evaluation_only_run_is_one_row(tmp_path: Path) -> None:
    folder = tmp_path / "evaluation"
    folder.mkdir()
    (folder / "step-000000.jsonl").write_text(json.dumps(episode(0.5, 1.0, 0.5)) + "\n")
    lines = decision_table(tmp_path).splitlines()
    assert len(lines) == 3
    assert lines[2].startswith("| step-000000, 1 episodes | 1.000 | 0.000 |")


def rule_episodes(task: EconDecisionTask, consumption_of=None) -> list[dict]:
    """One parsed episode per train state, replying the rule's decision (or another
    consumption)."""
    episodes = []
    for sample_id in task.sample_ids("train"):
        sample = task.get_sample(sample_id)
        household = sample.data["households"][0]
        rule = rule_decisions(task.sample_state(sample), task.utility)
        consumption = float(rule.consumption[household])
        row = episode(0.5, float(rule.work[household]),
                      consumption if consumption_of is None else consumption_of(consumption))
        row["sample_id"] = sample_id
        row["info"]["econ/decisions"][0]["household"] = household
        episodes.append(row)
    return episodes


def test_replies_are_compared_with_the_rule_on_their_own_states() -> None:
    task = EconDecisionTask(**SMALL)

    def agreement(episodes: list[dict]) -> dict[str, float]:
        return rule_agreement(decisions_beside_rule(episodes, task))

    following = agreement(rule_episodes(task))
    assert following == {"work on the rule's side": 1.0,
                         "corr. of consumption with the rule's": pytest.approx(1.0),
                         "consumption above the rule's": 0.0,
                         "consumption below the rule's": 0.0}
    one_step_up = agreement(rule_episodes(task, lambda c: c + 0.02))
    assert (one_step_up["consumption above the rule's"],
            one_step_up["consumption below the rule's"]) == (1.0, 0.0)
    against = agreement(rule_episodes(task, lambda c: 1.0 - c))
    assert against["corr. of consumption with the rule's"] == pytest.approx(-1.0)
    constant = agreement(rule_episodes(task, lambda c: 0.4))
    assert math.isnan(constant["corr. of consumption with the rule's"])
    unparsed = agreement([{"reward": -1.0, "metrics": {"json_parse_success": 0.0}}])
    assert all(math.isnan(value) for value in unparsed.values())


def beside(sample_id: str, work: float, rule_work: float, vs_rule: float) -> DecisionBesideRule:
    return DecisionBesideRule(sample_id, work, 0.2, rule_work, 0.2, vs_rule)


def test_the_split_by_work_choice_by_hand() -> None:
    pairs = [beside("a", 1.0, 1.0, 0.002), beside("b", 0.96, 0.9, 0.004),
             beside("c", 0.0, 0.0, 0.001), beside("d", 1.0, 0.2, -0.01),
             beside("e", 0.4, 1.0, -0.003)]
    rows = [line.split(" | ") for line in work_choice_split(pairs).splitlines()[2:]]
    assert [row[:3] for row in rows] == [["| works", "works", "2"], ["| rests", "rests", "1"],
                                         ["| rests", "works", "1"], ["| works", "rests", "1"]]
    assert rows[0][3].startswith("+0.003 [+0.002, +0.004]")
    assert [row[3] for row in rows[1:]] == ["+0.001", "-0.01", "-0.003"]
    parts = [float(row[4].rstrip(" |")) for row in rows]
    assert parts == pytest.approx([0.0012, 0.0002, -0.002, -0.0006])
    assert sum(parts) == pytest.approx(statistics.fmean(p.reward_vs_rule for p in pairs))
    assert work_choice_split([]) == "no parsed replies\n"
    with pytest.raises(ValueError, match="one household an episode"):
        work_choice_split([beside("a", 1.0, 1.0, 0.0), beside("a", 0.0, 1.0, 0.0)])


def test_the_table_against_the_rule_reads_the_runs_config(tmp_path: Path) -> None:
    task = EconDecisionTask(**SMALL)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"assignment_config": {
        "output_dir": "x", "task": {"name": "econ_decision", "parameters": SMALL}}}))
    folder = tmp_path / "evaluation"
    folder.mkdir()
    for step, rows in ((0, rule_episodes(task, lambda c: 0.4)), (10, rule_episodes(task))):
        (folder / f"step-{step:06d}.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows))
    lines = decision_table(tmp_path, against_rule=True).splitlines()
    assert lines[0].endswith("| work on the rule's side | corr. of consumption with the rule's "
                             "| consumption above the rule's | consumption below the rule's |")
    assert lines[2].split(" | ")[-4:-2] == ["1.000", "nan"]
    assert lines[3].endswith("| 1.000 | 1.000 | 0.000 | 0.000 |")
    assert len(lines) == 4
    rest_where_the_rule_works = rule_episodes(task)
    for row in rest_where_the_rule_works[:2]:
        row["info"]["econ/decisions"][0]["work"] = 0.0
    (folder / "step-000010.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rest_where_the_rule_works))
    table = decision_table(tmp_path, against_rule=True, by_work=True)
    last = table[table.index("By work choice, last: step-000010"):].splitlines()
    rule_works = sum(row["info"]["econ/decisions"][0]["work"] >= 0.5
                     for row in rule_episodes(task))
    assert last[4].startswith(f"| works | works | {rule_works - 2} |")
    assert last[7].startswith("| works | rests | 2 | +0 [+0, +0] |")
    with pytest.raises(ValueError, match="--by_work needs --against_rule"):
        decision_table(tmp_path, by_work=True)
