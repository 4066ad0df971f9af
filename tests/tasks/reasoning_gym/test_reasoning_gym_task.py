"""reasoning-gym datasets as a task: separate seeded splits, the dataset's own scorer, a
category per dataset, curriculum blocks, clear errors; the recipe trains 2 batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import reasoning_gym

from src.records.episode import Outcome
from src.tasks.instance.reasoning_gym.task import ReasoningGymTask
from src.tasks.task import derived_seed
from tests.conftest import requires_embedded_model
from tests.run_folders import jsonl_rows, run_command, run_recipe_cut

ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def mix(**parameters: object) -> ReasoningGymTask:
    return ReasoningGymTask({"chain_sum": 1.0, "products": 1.0},
                            {"chain_sum": ONE_DIGIT, "products": ONE_DIGIT}, **parameters)


def reply_to(task: ReasoningGymTask, sample_id: str, reply: str) -> tuple:
    episode = task.new_episode()
    episode.reset(seed=0, options={"sample_id": sample_id})
    _, reward, terminated, _, info = episode.step(reply)
    assert terminated
    return reward, info


def test_splits_are_separate_seeded_draws_and_the_same_in_every_build() -> None:
    first, second = mix(num_train=32, num_validation=16), mix(num_train=32, num_validation=16)
    questions = {split: [first.get_sample(i).data["question"] for i in first.sample_ids(split)]
                 for split in ("train", "validation")}
    assert questions["validation"] == [second.get_sample(i).data["question"]
                                       for i in second.sample_ids("validation")]
    assert questions["train"][:16] != questions["validation"]
    assert first.sample_ids("selection") == []
    reseeded = mix(num_train=32, num_validation=16, seed=1)
    assert [reseeded.get_sample(i).data["question"]
            for i in reseeded.sample_ids("validation")] != questions["validation"]


def test_each_dataset_is_a_category_and_scores_with_its_own_scorer() -> None:
    task = mix(num_train=4, num_validation=32)
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
    task = ReasoningGymTask("word_sorting", num_train=2, num_validation=8,
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
    task = mix(num_train=2, num_validation=2, format_weight=0.1)
    reward, _ = reply_to(task, "validation-000000", "\\boxed{-999}")
    assert reward == pytest.approx(0.1)


def test_curriculum_blocks_climb_the_levels_and_held_out_is_at_the_last() -> None:
    task = ReasoningGymTask("chain_sum", {"min_digits": 1, "max_digits": 1}, num_train=40,
                            num_validation=20, curriculum_levels=[0, 3])

    def terms(sample_id: str) -> int:
        question = task.get_sample(sample_id).data["question"].split(":")[-1]
        return question.count("+") + question.count("-") + 1

    train = task.sample_ids("train")
    assert max(terms(i) for i in train[:20]) == 2  # level 0: two terms
    assert max(terms(i) for i in train[20:]) > 2  # level 3: up to five
    assert max(terms(i) for i in task.sample_ids("validation")) > 2


def test_bad_parameters_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown reasoning-gym datasets"):
        ReasoningGymTask("no_such_dataset")
    with pytest.raises(ValueError, match="not datasets of the mix"):
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
    task = ReasoningGymTask("word_sorting", num_train=2, num_validation=4,
                            answer_format="answer_tag", format_weight=0.5)
    sample = task.get_sample("validation-000000")
    words = sample.data["answer"].split(", ")
    reward, info = reply_to(task, sample.sample_id,
                            f"<answer>{', '.join(reversed(words))}</answer>")
    assert 0.5 < reward < 1.5 and info["outcome"] is Outcome.INCORRECT
    reward, info = reply_to(task, sample.sample_id, f"<answer>{sample.data['answer']}</answer>")
    assert reward == pytest.approx(1.5) and info["outcome"] is Outcome.CORRECT
