"""SingleTurnTask: samples, a prompt and a rubric behind the ordinary task contract: the
splits and their ids, one reply that ends the episode, the outcome at the threshold, the
oracle or its plain absence, construction from a config as well as in Python, and a
rubric that scores a group's replies together scoring them where the group ends."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from src.records.episode import Episode, EpisodeStatus, Outcome, StepInfo
from src.run_experiment import main
from src.tasks.rubric import ERRORS_KEY, Rubric
from src.tasks.single_turn import SingleTurnTask
from tests.tasks.test_rubric import Together

ROWS = [{"question": "France", "answer": "Paris", "category": "europe"},
        {"question": "Japan", "answer": "Tokyo"},
        {"question": "Peru", "answer": "Lima", "category": "americas"}]


def exact(reply: str, answer: str) -> float:
    return float(reply.strip() == answer)


def brief(reply: str) -> float:
    return float(len(reply.split()) <= 3)


def first_letter(reply: str) -> float:
    return float(reply[0].isupper())  # raises on an empty reply


def answer_of(sample: Mapping[str, Any]) -> str:
    return str(sample["answer"])


def capitals(**settings: Any) -> SingleTurnTask:
    parameters: dict[str, Any] = {
        "samples": {"train": ROWS[:2], "validation": ROWS[2:]},
        "rubric": Rubric([exact, brief], weights=[1.0, 0.5]),
        "prompt": "The capital of {question}?"}
    return SingleTurnTask(**{**parameters, **settings})


def reply_to(task: SingleTurnTask, sample_id: str,
             reply: str) -> tuple[str, float, bool, bool, StepInfo]:
    episode = task.new_episode()
    episode.reset(options={"sample_id": sample_id})
    return episode.step(reply)


def test_each_split_has_its_samples_under_the_usual_ids() -> None:
    task = capitals(samples={"train": ROWS[:2], "selection": ROWS[2:]})
    assert task.sample_ids("train") == ["train-000000", "train-000001"]
    assert task.sample_ids("validation") == []
    assert task.sample_ids("selection") == ["selection-000000"]
    sample = task.get_sample("selection-000000")
    assert sample.category == "americas" and sample.data["answer"] == "Lima"
    assert task.get_sample("train-000001").category == "default"
    with pytest.raises(KeyError, match="split 'train' has 2"):
        task.get_sample("train-000002")
    with pytest.raises(ValueError, match="unknown splits \\['test'\\]"):
        capitals(samples={"train": ROWS, "test": ROWS})


def test_one_reply_ends_the_episode_scored_by_the_rubric() -> None:
    task = capitals()
    episode = task.new_episode()
    observation, info = episode.reset(options={"sample_id": "validation-000000"})
    assert observation == "The capital of Peru?" and info["category"] == "americas"
    _, reward, terminated, truncated, info = episode.step("Lima")
    assert (reward, terminated, truncated) == (1.5, True, False)
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.CORRECT
    assert info["metrics"] == {"exact": 1.0, "exact/error": 0.0, "brief": 1.0,
                               "brief/error": 0.0, "scorer_timeout": 0.0}
    assert info["extras"] == {}  # no function failed


@pytest.mark.parametrize(("threshold", "reply", "outcome"), [
    (1.0, "Paris", Outcome.CORRECT),  # 1.5
    (1.0, "I would say it is Paris", Outcome.INCORRECT),  # 0.0
    (0.5, "Lyon", Outcome.CORRECT),  # 0.5: brief alone reaches a lower threshold
    (1.5, "Paris", Outcome.CORRECT),  # the threshold itself is reached
    (2.0, "Paris", Outcome.INCORRECT),
])
def test_the_outcome_is_correct_from_the_threshold_on(threshold: float, reply: str,
                                                      outcome: Outcome) -> None:
    assert reply_to(capitals(threshold=threshold), "train-000000", reply)[4]["outcome"] is outcome


def one(reply: str) -> float:
    return 1.0


def two(reply: str) -> float:
    return 1.0


def three(reply: str) -> float:
    return 1.0


def test_a_weighted_sum_that_rounds_below_the_threshold_still_reaches_it() -> None:
    task = capitals(rubric=Rubric([one, two, three], weights=[0.7, 0.2, 0.1]))
    _, reward, _, _, info = reply_to(task, "train-000000", "")
    assert reward < 1.0 and info["outcome"] is Outcome.CORRECT


def test_a_reward_function_that_raises_on_a_reply_does_not_end_the_run() -> None:
    task = capitals(rubric=Rubric([first_letter, brief]))
    _, reward, terminated, _, info = reply_to(task, "train-000000", "")
    assert (reward, terminated, info["status"]) == (1.0, True, EpisodeStatus.COMPLETED)
    assert info["metrics"]["first_letter"] == 0.0 and info["metrics"]["first_letter/error"] == 1.0
    assert info["extras"]["reward_function_errors"]["first_letter"].startswith("IndexError")


def test_a_rubric_may_be_given_as_reward_terms() -> None:
    task = capitals(rubric=[{"function": "tests.tasks.test_single_turn.exact", "weight": 2.0},
                            {"function": "tests.tasks.test_single_turn.brief"}])
    assert task.rubric.names == ("exact", "brief")
    assert reply_to(task, "train-000000", "Paris")[1] == 3.0
    with pytest.raises(ValidationError, match="parameter"):
        capitals(rubric=[{"function": "tests.tasks.test_single_turn.exact", "parameter": {}}])


def test_without_an_oracle_the_oracle_reply_says_so() -> None:
    episode = capitals().new_episode()
    episode.reset(options={"sample_id": "train-000000"})
    with pytest.raises(NotImplementedError, match="SingleTurnTask has no oracle: give"):
        episode.oracle_reply()
    for oracle in (answer_of, "tests.tasks.test_single_turn.answer_of"):
        episode = capitals(oracle=oracle).new_episode()
        episode.reset(options={"sample_id": "train-000000"})
        assert episode.oracle_reply() == "Paris"


def test_a_subclass_may_write_its_own_prompt() -> None:
    class Shouted(SingleTurnTask):
        def __init__(self) -> None:
            super().__init__({"train": [{"country": "France", "answer": "Paris"}]},
                             Rubric([exact]))

        def prompt(self, sample: Mapping[str, Any]) -> str:
            return f"CAPITAL OF {sample['country'].upper()}?"

    episode = Shouted().new_episode()
    assert episode.reset(options={"sample_id": "train-000000"})[0] == "CAPITAL OF FRANCE?"


def test_samples_that_cannot_be_asked_or_scored_are_refused_when_built() -> None:
    with pytest.raises(ValueError, match="sample train-000000 lacks country, which the prompt"):
        capitals(prompt="The capital of {country}?")
    with pytest.raises(ValueError, match="train-000001 lacks answer"):
        capitals(samples={"train": [ROWS[0], {"question": "Chad"}]})
    with pytest.raises(ValueError, match="'\\{0\\}' is positional"):
        capitals(prompt="The capital of {0}?")
    with pytest.raises(ValueError, match="samples\\['train'\\]\\[0\\] is a str"):
        capitals(samples={"train": ["France"]})
    # a prompt that reads into a field names the field itself
    task = capitals(samples={"train": [{"row": ["France"], "answer": "Paris"}]},
                    prompt="The capital of {row[0]}?")
    assert task.new_episode().reset(options={"sample_id": "train-000000"})[0] == (
        "The capital of France?")


CONFIG = """\
# SingleTurnTask named by a config, its reward functions and oracle by dotted path
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 2, group_size: 2, num_epochs: 1}}
  evaluation: {{at_end: true}}
  task:
    name: capitals
    module: src.tasks.single_turn.SingleTurnTask
    parameters:
      samples:
        train: [{{question: France, answer: Paris}}, {{question: Japan, answer: Tokyo}},
                {{question: Chad, answer: NDjamena, category: africa}}]
        validation: [{{question: Peru, answer: Lima}}]
      prompt: "What is the capital of {{question}}?"
      rubric: {{tests.tasks.test_single_turn.exact: 1.0, tests.tasks.test_single_turn.brief: 0.5}}
      oracle: tests.tasks.test_single_turn.answer_of
  agent: {{name: oracle_agent}}
"""


def test_a_config_builds_it_with_its_parameters_checked(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(output=tmp_path / "run"))
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [row["rollout/exact"] for row in rows if "rollout/exact" in row] == [1.0, 1.0]
    [evaluation] = [row for row in rows if "eval/exact" in row]
    assert evaluation["eval/reward"] == 1.5 and evaluation["eval/brief/error"] == 0.0
    config.write_text(CONFIG.format(output=tmp_path / "refused")
                      .replace("prompt:", "threshold: high\n      prompt:"))
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    assert "invalid parameters for SingleTurnTask: threshold:" in capsys.readouterr().err


def test_a_rubric_that_scores_together_scores_the_group_where_it_ends() -> None:
    together = Together()  # worth a tenth of the reply's length; fails on an empty one
    task = capitals(rubric=Rubric([exact, together], weights=[1.0, 0.5]))
    group = []
    for index, reply in enumerate(["Lima", "", "Cusco"]):
        environment = task.new_episode()
        environment.reset(options={"sample_id": "validation-000000"})
        assert environment.sample is not None
        episode = Episode(environment.sample, index, 0, environment)
        _, episode.reward, terminated, _, info = environment.step(reply)
        assert terminated and episode.reward == 0.0 and info["metrics"] == {}
        episode.status, episode.outcome = info["status"], info["outcome"]
        group.append(episode)
    assert together.calls == []  # the steps score nothing
    scores = task.score_group(group)
    assert together.calls == [["Lima", "", "Cusco"]]
    assert [score.reward for score in scores] == [1.0 + 0.5 * 0.4, 0.0, 0.5 * 0.5]
    assert [score.outcome for score in scores] == [Outcome.CORRECT, Outcome.INCORRECT,
                                                   Outcome.INCORRECT]
    # each reply's figures as the rubric scores it by itself
    alone = Rubric([exact, Together()], weights=[1.0, 0.5])
    for episode, score in zip(group, scores, strict=True):
        assert episode.environment.last_reply is not None
        by_itself = alone.score(episode.environment.last_reply, episode.sample,
                                "The capital of Peru?")
        assert score.metrics == by_itself.metrics() and score.info == by_itself.info()
    assert scores[1].info == {ERRORS_KEY: {"together": "ValueError: no reply"}}
