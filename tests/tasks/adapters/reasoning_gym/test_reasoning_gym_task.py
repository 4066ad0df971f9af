"""reasoning-gym datasets as a task: separate seeded splits, the dataset's own scorer, a
category per dataset, curriculum blocks, clear errors; the recipe trains 2 batches."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import reasoning_gym

from src.records.episode import EpisodeStatus, Outcome
from src.sandboxes.bounded_call import worker_pid
from src.tasks.adapters.reasoning_gym.task import ReasoningGymTask
from src.tasks.splits import SplitsWithSelection
from src.tasks.task import TaskSettingError, derived_seed
from tests.conftest import requires_embedded_model
from tests.run_folders import jsonl_rows, run_command, run_recipe_cut

ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def mix(splits: SplitsWithSelection, **parameters: object) -> ReasoningGymTask:
    return ReasoningGymTask({"chain_sum": 1.0, "products": 1.0},
                            {"chain_sum": ONE_DIGIT, "products": ONE_DIGIT}, splits=splits,
                            **parameters)


def reply_to(task: ReasoningGymTask, sample_id: str, reply: str) -> tuple:
    episode = task.new_episode()
    episode.reset(seed=0, options={"sample_id": sample_id})
    _, reward, terminated, _, info = episode.step(reply)
    assert terminated
    return reward, info


def test_splits_are_separate_seeded_draws_and_the_same_in_every_build() -> None:
    splits = SplitsWithSelection(num_train=32, num_validation=16)
    first, second = mix(splits), mix(splits)
    questions = {split: [first.get_sample(i).data["question"] for i in first.sample_ids(split)]
                 for split in ("train", "validation")}
    assert questions["validation"] == [second.get_sample(i).data["question"]
                                       for i in second.sample_ids("validation")]
    assert questions["train"][:16] != questions["validation"]
    assert first.sample_ids("selection") == []
    reseeded = mix(SplitsWithSelection(num_train=32, num_validation=16, seed=1))
    assert [reseeded.get_sample(i).data["question"]
            for i in reseeded.sample_ids("validation")] != questions["validation"]


def test_each_dataset_is_a_category_and_scores_with_its_own_scorer() -> None:
    task = mix(SplitsWithSelection(num_train=4, num_validation=32))
    samples = [task.get_sample(i) for i in task.sample_ids("validation")]
    assert {sample.category for sample in samples} == {"chain_sum", "products"}
    for sample in samples[:6]:
        answer = sample.data["answer"]
        reward, info = reply_to(task, sample.sample_id, f"so \\boxed{{{answer}}}")
        assert reward == 1.0 and info["outcome"] is Outcome.CORRECT
        assert info["metrics"]["score"] == 1.0 and info["metrics"]["answered"] == 1.0
        reward, info = reply_to(task, sample.sample_id, f"\\boxed{{{int(answer) + 1}}}")
        assert reward == 0.0 and info["outcome"] is Outcome.INCORRECT
        reward, info = reply_to(task, sample.sample_id, f"the answer is {answer}")
        assert reward == 0.0 and info["metrics"]["answered"] == 0.0


def test_the_score_is_the_datasets_own_partial_credit() -> None:
    # word_sorting scores a wrong order below 1 by its own rule: passed through, not rounded
    task = ReasoningGymTask("word_sorting",
                            splits=SplitsWithSelection(num_train=2, num_validation=8),
                            answer_format="answer_tag")
    sample = task.get_sample("validation-000000")
    words = sample.data["answer"].split(", ")
    shuffled = ", ".join(reversed(words))
    # the same problem drawn by reasoning-gym itself, with the validation split's seed
    dataset = reasoning_gym.create_dataset(
        "word_sorting", seed=derived_seed("reasoning_gym", 0, "validation", 0), size=8)
    assert dataset[0]["question"] == sample.data["question"]
    expected = dataset.score_answer(shuffled, dataset[0])
    reward, info = reply_to(task, sample.sample_id, f"<answer>{shuffled}</answer>")
    assert reward == pytest.approx(expected) and expected < 1.0
    assert info["outcome"] is Outcome.INCORRECT


def test_format_weight_rewards_an_answer_in_the_format() -> None:
    task = mix(SplitsWithSelection(num_train=2, num_validation=2), format_weight=0.1)
    reward, _ = reply_to(task, "validation-000000", "\\boxed{-999}")
    assert reward == pytest.approx(0.1)


def test_curriculum_blocks_climb_the_levels_and_held_out_is_at_the_last() -> None:
    task = ReasoningGymTask("chain_sum", {"min_digits": 1, "max_digits": 1},
                            splits=SplitsWithSelection(num_train=40, num_validation=20),
                            curriculum_levels=[0, 3])

    def terms(sample_id: str) -> int:
        question = task.get_sample(sample_id).data["question"].split(":")[-1]
        return question.count("+") + question.count("-") + 1

    train = task.sample_ids("train")
    assert max(terms(i) for i in train[:20]) == 2  # level 0: two terms
    assert max(terms(i) for i in train[20:]) > 2  # level 3: up to five
    assert max(terms(i) for i in task.sample_ids("validation")) > 2


def test_bad_parameters_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset 'no_such_dataset'"):
        ReasoningGymTask("no_such_dataset")
    with pytest.raises(ValueError, match="not a dataset of the mix"):
        ReasoningGymTask({"chain_sum": 1.0}, {"products": {}})
    with pytest.raises(ValueError, match="set by the task"):
        ReasoningGymTask("chain_sum", {"seed": 3})
    with pytest.raises((ValueError, AssertionError, TypeError)):
        ReasoningGymTask("chain_sum", {"min_terms": 0})  # the dataset's own check


def test_oracle_run_scores_every_problem(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"""\
assignment_config:
  output_dir: {tmp_path / 'run'}
  random_seed: 1
  rollout: {{batch_size: 8, group_size: 2, max_batches: 2}}
  evaluation: {{at_end: true, max_samples: 16}}
  task:
    name: reasoning_gym
    parameters:
      dataset: {{chain_sum: 1, products: 1, basic_arithmetic: 1}}
      num_train: 16
      num_validation: 16
  agent: {{name: oracle_agent}}
""")
    assert run_command(config) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    evaluation = [json.loads(line) for line in
                  next((tmp_path / "run" / "evaluation").glob("step-*.jsonl")).open()]
    assert len(evaluation) == 16 and all(row["outcome"] == "correct" for row in evaluation)
    assert summary["overall"]


@pytest.mark.slow
@requires_embedded_model
def test_the_recipe_trains_two_batches_on_the_embedded_model(tmp_path: Path) -> None:
    run = run_recipe_cut(tmp_path, "reasoning_gym_grpo.yaml", """\
  rollout: {max_batches: 2, batch_size: 4}
  evaluation: {max_samples: 8, every_n_batches: null}
""")
    rows = jsonl_rows(run / "metrics.jsonl")
    assert [row["step"] for row in rows if "rollout/score" in row] == [1, 2]
    assert sum("eval/score" in row for row in rows) == 2
    episodes = jsonl_rows(run / "runs.jsonl")
    assert {episode["category"] for episode in episodes} <= {"chain_sum", "products"}


def test_with_a_format_weight_correct_still_means_the_datasets_full_marks() -> None:
    task = ReasoningGymTask("word_sorting",
                            splits=SplitsWithSelection(num_train=2, num_validation=4),
                            answer_format="answer_tag", format_weight=0.5)
    sample = task.get_sample("validation-000000")
    words = sample.data["answer"].split(", ")
    reward, info = reply_to(task, sample.sample_id,
                            f"<answer>{', '.join(reversed(words))}</answer>")
    assert 0.5 < reward < 1.5 and info["outcome"] is Outcome.INCORRECT
    reward, info = reply_to(task, sample.sample_id, f"<answer>{sample.data['answer']}</answer>")
    assert reward == pytest.approx(1.5) and info["outcome"] is Outcome.CORRECT


@pytest.mark.parametrize("answer_format, wrap", [
    ("boxed", lambda answer: f"so \\boxed{{ {answer} }}"),
    ("answer_tag", lambda answer: f"<answer> {answer}\n</answer>"),
])
def test_an_answer_padded_with_spaces_is_the_answer_in_both_formats(answer_format, wrap) -> None:
    # basic_arithmetic's own scorer gives " 42 " partial credit: it must see "42"
    task = ReasoningGymTask("basic_arithmetic",
                            splits=SplitsWithSelection(num_train=2, num_validation=4),
                            answer_format=answer_format)
    for sample_id in task.sample_ids("validation"):
        reward, info = reply_to(task, sample_id, wrap(task.get_sample(sample_id).data["answer"]))
        assert reward == 1.0 and info["outcome"] is Outcome.CORRECT


def test_an_empty_box_is_no_answer() -> None:
    task = ReasoningGymTask("basic_arithmetic",
                            splits=SplitsWithSelection(num_train=2, num_validation=2))
    reward, info = reply_to(task, "validation-000000", "\\boxed{  }")
    assert reward == 0.0 and info["metrics"]["answered"] == 0.0


def test_held_out_splits_never_ask_a_training_question() -> None:
    # one-digit sums: about 200 distinct questions, so independent draws of 150 and 60
    # share many; the held-out splits skip them and still hold as many samples as asked
    task = ReasoningGymTask("chain_sum", ONE_DIGIT,
                            splits=SplitsWithSelection(num_train=150, num_validation=60,
                                                       num_selection=30))
    questions = {split: [task.get_sample(i).data["question"] for i in task.sample_ids(split)]
                 for split in ("train", "validation", "selection")}
    assert len(questions["validation"]) == 60 and len(questions["selection"]) == 30
    assert not set(questions["validation"]) & set(questions["train"])
    assert not set(questions["selection"]) & (set(questions["train"])
                                              | set(questions["validation"]))
    # the skipped draws are reasoning-gym's own: each sample still scores with its entry
    for sample_id in task.sample_ids("validation")[-5:]:
        reward, _ = reply_to(task, sample_id, f"\\boxed{{{task.get_sample(sample_id).data['answer']}}}")
        assert reward == 1.0


def test_held_out_draws_without_a_training_question_are_as_before() -> None:
    task = ReasoningGymTask("word_sorting",
                            splits=SplitsWithSelection(num_train=4, num_validation=8))
    dataset = reasoning_gym.create_dataset(
        "word_sorting", seed=derived_seed("reasoning_gym", 0, "validation", 0), size=8)
    assert [task.get_sample(i).data["question"] for i in task.sample_ids("validation")] == [
        entry["question"] for entry in dataset]


def test_too_few_distinct_questions_for_the_held_out_split_is_a_clear_error() -> None:
    tiny = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
            "operators": ("+",), "allow_negation": False, "allow_parentheses": False}
    with pytest.raises(ValueError, match="validation: .* not in the train split"):
        ReasoningGymTask("basic_arithmetic", tiny,
                         splits=SplitsWithSelection(num_train=400, num_validation=100))


def test_check_parameters_names_a_misspelled_dataset_with_the_closest_names() -> None:
    with pytest.raises(TaskSettingError) as raised:
        ReasoningGymTask.check_parameters({"dataset": "basic_arithmatic"})
    assert raised.value.key == ("dataset",)
    assert "'basic_arithmatic'" in raised.value.message
    assert "'basic_arithmetic'" in raised.value.message
    with pytest.raises(TaskSettingError) as raised:
        ReasoningGymTask.check_parameters({"dataset": {"chain_sum": 1, "prodcts": 1}})
    assert raised.value.key == ("dataset", "prodcts") and "'products'" in raised.value.message


def test_check_parameters_names_a_config_key_the_dataset_does_not_have() -> None:
    with pytest.raises(TaskSettingError) as raised:
        ReasoningGymTask.check_parameters({"dataset": "basic_arithmetic",
                                           "config": {"max_digit": 2}})
    assert raised.value.key == ("config", "max_digit")
    assert "'max_digits'" in raised.value.message
    with pytest.raises(TaskSettingError) as raised:
        ReasoningGymTask.check_parameters({"dataset": {"chain_sum": 1, "products": 1},
                                           "config": {"products": {"min_term": 2}}})
    assert raised.value.key == ("config", "products", "min_term")
    with pytest.raises(TaskSettingError) as raised:
        ReasoningGymTask.check_parameters({"dataset": {"chain_sum": 1},
                                           "config": {"products": {}}})
    assert raised.value.key == ("config", "products")
    with pytest.raises(TaskSettingError) as raised:
        ReasoningGymTask.check_parameters({"dataset": "chain_sum", "config": {"seed": 3}})
    assert raised.value.key == ("config", "seed")
    # what exists passes, as does a config of the dataset's own fields
    ReasoningGymTask.check_parameters({"dataset": {"chain_sum": 1, "products": 1},
                                       "config": {"chain_sum": ONE_DIGIT}})
    ReasoningGymTask.check_parameters({"dataset": "basic_arithmetic",
                                       "config": {"max_digits": 2}})


def test_a_reply_that_keeps_the_scorer_computing_scores_zero_within_the_bound() -> None:
    # countdown's own scorer evaluates the expression with sympy: 21 characters that it
    # computes for ever; the scorer is stopped at its bound and the reply scores 0
    task = ReasoningGymTask("countdown", splits=SplitsWithSelection(num_train=2, num_validation=2),
                            scorer_timeout_s=2.0)
    sample_id = "validation-000000"
    reply_to(task, sample_id, "\\boxed{1}")  # the scoring process is up
    before = worker_pid()
    started = time.monotonic()
    reward, info = reply_to(task, sample_id, "\\boxed{9**9**9**9}")
    assert time.monotonic() - started < 60.0
    assert reward == 0.0 and info["outcome"] is Outcome.INCORRECT
    assert info["status"] is EpisodeStatus.COMPLETED  # a scored outcome, not a task error
    assert info["metrics"]["scorer_timeout"] == 1.0 and info["metrics"]["answered"] == 1.0
    assert info["extras"]["scorer_timeouts"] == ["score"]
    with pytest.raises(ProcessLookupError):  # the scorer was killed: nothing left spinning
        os.kill(before, 0)
    answer = task.get_sample(sample_id).data["answer"]
    reward, info = reply_to(task, sample_id, f"\\boxed{{{answer}}}")
    assert reward == 1.0 and info["metrics"]["scorer_timeout"] == 0.0


@pytest.mark.parametrize("dataset", ["countdown", "puzzle24"])
def test_a_reply_that_its_scorer_evaluates_as_python_cannot_touch_the_host(
        dataset: str, tmp_path: Path) -> None:
    # these scorers parse the expression with sympy, which evaluates it as Python
    task = ReasoningGymTask(dataset, splits=SplitsWithSelection(num_train=2, num_validation=2))
    escaped = tmp_path / "escaped"
    reply = f"\\boxed{{__import__('pathlib').Path('{escaped}').touch() or 24}}"
    reward, info = reply_to(task, "validation-000000", reply)
    assert not escaped.exists()
    assert info["outcome"] is Outcome.INCORRECT and info["status"] is EpisodeStatus.COMPLETED
