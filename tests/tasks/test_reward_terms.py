"""Reward terms for any task family from its config alone: a judge added to DB-bench,
econ and a Gymnasium environment's episodes (families whose constructors take no
`reward_terms`) scores each episode's last reply in its dialogue where the group ends,
its reward added to the family's own, its failures recorded, the outcome the family's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from src.configuration.models import ComponentConfig
from src.configuration.yaml_source import YamlSource
from src.run.assembly import instantiate, plan_component
from src.run_experiment import main
from src.tasks.rubric import ERRORS_KEY, TEXTS_KEY
from src.tasks.task import Task
from tests.tasks.model_rewards.judge_server import JudgeServer
from tests.tasks.stepping import recorded_episode

pytest.importorskip("openai", reason="the judge's client: pip install -e '.[openai]'")

DB_BENCH = {"name": "db_bench_single_skill",
            "parameters": {"num_train": 4, "num_validation": 2, "seed": 42, "max_round": 3}}
ECON = {"name": "econ_decision",
        "parameters": {"num_train": 4, "num_validation": 2, "num_economies": 2, "months": 60,
                       "households_per_sample": 2, "few_shot_examples": 2}}
NUMBER_GUESS = {"name": "gymnasium_text",
                "parameters": {"entry_point": "examples.gymnasium_text.number_guess:NumberGuess",
                               "env_kwargs": {"low": 1, "high": 3, "max_guesses": 3},
                               "num_train": 8, "num_validation": 2, "max_turns": 3}}
TEMPLATE = "Sample {sample_id}.\nThe dialogue:\n{transcript}\nIts last reply: {reply}\nScore 0-10."
UNREADABLE = "train-000001"  # the sample whose verdicts the judge garbles


def judge_term(server: JudgeServer, weight: float = 0.5) -> dict[str, Any]:
    return {"function": "src.tasks.model_rewards.judge.Judge", "weight": weight,
            "parameters": {"name": "judged", "base_url": server.base_url, "model": "judge-7b",
                           "template": TEMPLATE, "score_range": [0, 10],
                           "backoff_s": 0.01}}


def verdict(request: dict[str, Any]) -> str:
    asked = request["messages"][-1]["content"]
    return "no idea" if f"Sample {UNREADABLE}." in asked else "Score: 8"


def oracle_run(tmp_path: Path, name: str, task: dict[str, Any]) -> list[dict[str, Any]]:
    """The episodes of a run of `task` answered by the oracle (2 batches of 2 samples,
    2 episodes each, and the held-out evaluation)."""
    config = {"assignment_config": {
        "output_dir": str(tmp_path / name), "random_seed": 42,
        "rollout": {"batch_size": 2, "group_size": 2, "num_epochs": 1},
        "evaluation": {"at_end": True}, "task": task, "agent": {"name": "oracle_agent"}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["--config_path", str(path), "--no_progress"]) == 0
    return [json.loads(line) for line in (tmp_path / name / "runs.jsonl").open()]


@pytest.mark.parametrize("family", [DB_BENCH, ECON], ids=["db_bench", "econ"])
def test_a_family_is_judged_from_its_config_alone(
        tmp_path: Path, serve: Callable[..., JudgeServer], family: dict[str, Any]) -> None:
    server = serve(by=verdict)
    plain = oracle_run(tmp_path, "plain", family)
    judged_task = {**family, "parameters": {**family["parameters"],
                                            "reward_terms": [judge_term(server)]}}
    judged = oracle_run(tmp_path, "judged", judged_task)
    assert len(judged) == len(plain) == 8
    for before, after in zip(plain, judged, strict=True):
        assert after["sample_id"] == before["sample_id"]
        # the family's own outcome (its verifier), never the judge's
        assert (after["status"], after["outcome"]) == (before["status"], before["outcome"])
        assert after["status"] == "completed"
        info = after["info"]
        if after["sample_id"] == UNREADABLE:  # a judge error: recorded, the term scores 0
            assert after["reward"] == before["reward"]
            assert info[ERRORS_KEY]["judged"].startswith("JudgeError: unreadable verdict")
            assert after["metrics"]["judged/error"] == 1.0
            continue
        assert after["reward"] == pytest.approx(before["reward"] + 0.5 * 0.8)
        assert after["metrics"]["judged"] == pytest.approx(0.8)
        # the judge read the whole dialogue, the agent's last reply ending it
        asked = info[TEXTS_KEY]["judged"]["prompt"]
        chat = after["chat"]
        assert f"user: {chat[0]['content'][:40]}" in asked
        assert f"Its last reply: {chat[-1]['content'][:40]}" in asked
        assert sum(message["role"] == "agent" for message in chat) == asked.count("\nagent: ")


def test_an_adapters_multi_turn_episode_is_judged_where_its_group_ends(
        tmp_path: Path, serve: Callable[..., JudgeServer]) -> None:
    server = serve(by=verdict)
    data = {"task": {**NUMBER_GUESS, "parameters": {
        **NUMBER_GUESS["parameters"], "reward_terms": [judge_term(server, weight=1.0)]}}}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(data))
    source = YamlSource(path)
    plan = plan_component(source.validate(ComponentConfig, source.data["task"], ("task",)),
                          ("task",), source, Task, {})
    task = instantiate(plan, {})
    try:
        assert task.added_terms is not None and task.added_terms.names == ("judged",)
        sample_id = task.sample_ids("train")[0]
        group = [recorded_episode(task, sample_id, ["1", "2", "3"], index)
                 for index in range(2)]
        own = [episode.reward for episode in group]
        scores = task.score_group(group)
    finally:
        task.close()
    assert len(server.requests) == 1  # the group's identical dialogues: one request
    for episode, score, reward in zip(group, scores, own, strict=True):
        assert score.reward == pytest.approx(reward + 0.8)
        assert score.metrics["judged"] == pytest.approx(0.8)
        asked = score.info[TEXTS_KEY]["judged"]["prompt"]
        replies = [message.content for message in episode.chat if message.role == "agent"]
        assert asked.count("\nagent: ") == len(replies) and replies[-1] == asked.split(
            "Its last reply: ")[1].split("\n")[0]


def test_reward_terms_are_checked_where_the_config_is_read(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    config = {"assignment_config": {
        "output_dir": str(tmp_path / "run"),
        "rollout": {"batch_size": 2, "group_size": 2, "num_epochs": 1},
        "task": {**DB_BENCH, "parameters": {**DB_BENCH["parameters"], "reward_terms": [
            {"function": "src.tasks.model_rewards.judge.Judge", "parameters": {
                "base_url": "http://127.0.0.1:9/v1", "model": "m", "template": "{reply}",
                "score_range": [0, 10], "backof_s": 1}}]}},
        "agent": {"name": "oracle_agent"}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["--config_path", str(path), "--dry_run"]) == 2
    error = capsys.readouterr().err
    assert "backof_s" in error and "task.parameters.reward_terms.0" in error
    # a judge naming a language model the run does not list
    config["assignment_config"]["task"]["parameters"]["reward_terms"] = [
        {"function": "src.tasks.model_rewards.judge.Judge", "parameters": {
            "language_model": "grader", "template": "{reply}", "score_range": [0, 10]}}]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["--config_path", str(path), "--dry_run"]) == 2
    assert "names language model 'grader', which is not in language_model_list" in (
        capsys.readouterr().err)
    # listed, it passes, a held-out selection split too (whose check builds the task
    # without loading the judge's model)
    config["assignment_config"]["language_model_list"] = [{
        "name": "grader",
        "module": "src.language_models.instance.huggingface_lora_language_model",
        "parameters": {"model_name_or_path": "embedded:smollm2-135m"}}]
    config["assignment_config"]["task"]["parameters"]["num_selection"] = 2
    config["assignment_config"]["evaluation"] = {"splits": ["selection", "validation"]}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["--config_path", str(path), "--dry_run"]) == 0
    assert "+ reward term src.tasks.model_rewards.judge.Judge" in capsys.readouterr().out
