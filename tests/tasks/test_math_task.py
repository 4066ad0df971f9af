"""The math task: retries, group-wise rewards, verl reward files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from src.records.chat import Role
from src.records.episode import Episode, EpisodeStatus, Outcome
from src.records.trajectory import Trajectory
from src.tasks.instance.math_problems.problems import load_rows
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.instance.math_problems.verl_reward import CustomRewardFunction
from src.tasks.splits import Splits


def finished_episode(task: MathProblemsTask, reply: str, completion_tokens: int) -> Episode:
    environment = task.new_episode()
    observation, _ = environment.reset(options={"sample_id": "train-000000"})
    assert environment.sample is not None
    episode = Episode(environment.sample, 0, 0, environment)
    episode.add_message(Role.USER, observation)
    episode.add_message(Role.AGENT, reply)
    _, episode.reward, _, _, info = environment.step(reply)
    episode.status, episode.outcome = info["status"], info["outcome"]
    episode.metrics.update(info["metrics"])
    episode.trajectory = Trajectory()
    episode.trajectory.append_sampled([1] * completion_tokens, [0.0] * completion_tokens, "stop", 0)
    return episode


def test_wrong_answers_get_retries_until_the_round_limit() -> None:
    task = MathProblemsTask(max_round=3, reward_weights={"accuracy": 0.9, "boxed_number": 0.1})
    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    gold = task.get_sample("train-000000").data["answer"]
    observation, reward, terminated, truncated, info = environment.step("\\boxed{-1}")
    assert (observation, reward, terminated, truncated) == (task.retry_message, 0.0, False, False)
    assert info["status"] == EpisodeStatus.RUNNING
    _, reward, terminated, _, info = environment.step(f"\\boxed{{{gold}}}")
    assert terminated and reward == pytest.approx(1.0) and info["outcome"] == Outcome.CORRECT

    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    for _ in range(2):
        environment.step("no idea")
    _, reward, terminated, truncated, info = environment.step("\\boxed{-1}")
    # the last try is a final answer: the episode completes, incorrect
    assert terminated and not truncated and info["status"] == EpisodeStatus.COMPLETED
    assert info["outcome"] == Outcome.INCORRECT
    assert reward == pytest.approx(0.1)  # a well-formed boxed number, wrong


def reply_to(task: MathProblemsTask, reply: str) -> tuple[float, Outcome, dict[str, float]]:
    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    _, reward, _, _, info = environment.step(reply)
    return reward, info["outcome"], info["metrics"]


def test_the_rubric_adds_the_weighted_rewards_in_the_order_of_the_weights() -> None:
    task = MathProblemsTask(reward_weights={"format2": 0.1, "boxed_number": 0.2,
                                            "accuracy": 0.3})
    gold = task.get_sample("train-000000").data["answer"]
    reward, outcome, metrics = reply_to(task, f"<think>\\boxed{{{gold}}}</think> \\boxed{{{gold}}}")
    # by hand, left to right: 0.6000000000000001; in the names' order it would be 0.6
    assert reward == 0.1 * 1.0 + 0.2 * 1.0 + 0.3 * 1.0 != 0.3 + 0.2 + 0.1
    assert outcome == Outcome.CORRECT
    # the names sorted, `boxed_answer` reported though unweighted, no error metrics
    assert list(metrics.items()) == [("accuracy", 1.0), ("boxed_answer", 1.0),
                                     ("boxed_number", 1.0), ("format2", 1.0)]
    wrong = reply_to(task, "\\boxed{-1}")
    assert wrong[:2] == (0.2, Outcome.INCORRECT) and wrong[2]["boxed_answer"] == 1.0
    for malformed in ("no idea", "\\boxed{", "\\boxed{ }"):
        reward, outcome, metrics = reply_to(task, malformed)
        assert (reward, outcome) == (0.0, Outcome.INCORRECT)
        assert set(metrics.values()) == {0.0}


def test_the_quickstart_weights_score_by_hand() -> None:
    task = MathProblemsTask(reward_weights={"accuracy": 0.9, "boxed_number": 0.1})
    assert task.rubric.names == ("accuracy", "boxed_number", "boxed_answer")
    gold = task.get_sample("train-000000").data["answer"]
    assert reply_to(task, f"so \\boxed{{{gold}}}") == (
        0.9 * 1.0 + 0.1 * 1.0, Outcome.CORRECT,
        {"accuracy": 1.0, "boxed_answer": 1.0, "boxed_number": 1.0})
    assert reply_to(task, "so \\boxed{x+1}") == (
        0.0, Outcome.INCORRECT, {"accuracy": 0.0, "boxed_answer": 1.0, "boxed_number": 0.0})
    assert reply_to(task, "so \\boxed{-1}")[:2] == (0.9 * 0.0 + 0.1 * 1.0, Outcome.INCORRECT)


def test_group_rewards_add_cosine_and_length_then_normalise() -> None:
    task = MathProblemsTask(reward_weights={"accuracy": 1.0, "cosine": 1.0, "length": 1.0},
                            cosine={"max_len": 100})
    gold = MathProblemsTask().get_sample("train-000000").data["answer"]
    group = [finished_episode(task, f"\\boxed{{{gold}}}", 0),
             finished_episode(task, f"\\boxed{{{gold}}}", 50),
             finished_episode(task, "\\boxed{-1}", 100)]
    scores = task.score_group(group)
    # accuracy + cosine + length (lambda 0.5, 0, -0.5; the wrong one min(0, -0.5))
    assert [s.reward for s in scores] == pytest.approx([1 + 1.0 + 0.5, 1 + 0.55 + 0.0,
                                                        0 - 0.1 - 0.5])
    assert scores[1].metrics == pytest.approx({"cosine": 0.55, "length": 0.0})
    assert [e.reward for e in group] == [1.0, 1.0, 0.0]  # the caller gives the scores

    normalising = MathProblemsTask(reward_weights={"accuracy": 1.0}, normalize_rewards=True)
    group = [finished_episode(normalising, f"\\boxed{{{gold}}}", 5),
             finished_episode(normalising, "\\boxed{-1}", 5)]
    scores = normalising.score_group(group)
    # mean 0.5, unbiased std of (1, 0) = 0.7071
    assert [s.reward for s in scores] == pytest.approx([0.70711, -0.70711], abs=1e-4)
    assert scores[0].info == {"reward_before_normalisation": 1.0}


def test_verl_reward_file_is_used_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "my_reward.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    hit = ground_truth in solution_str\n"
        "    return {'score': 2.0 if hit else -1.0, 'hit': hit, 'note': 'text'}\n"
        "def as_float(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return 0.25\n")
    task = MathProblemsTask(reward_weights={"accuracy": 0.0},
                            custom_reward_function=CustomRewardFunction(path=str(path)))
    gold = task.get_sample("train-000000").data["answer"]
    episode = finished_episode(task, f"\\boxed{{{gold}}}", 3)
    assert episode.reward == 2.0 and episode.metrics["custom/hit"] == 1.0
    assert finished_episode(task, "\\boxed{-1}", 3).reward == -1.0
    as_float = MathProblemsTask(custom_reward_function={"path": str(path), "name": "as_float"})
    assert finished_episode(as_float, "x", 1).reward == pytest.approx(0.25)  # accuracy 0 + 0.25


def test_the_verl_function_gets_verls_arguments_and_its_failure_ends_the_step(
        tmp_path: Path) -> None:
    path = tmp_path / "my_reward.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if not solution_str:\n"
        "        raise ValueError('empty')\n"
        "    assert data_source == 'procedural' and solution_str == 'seven'\n"
        "    assert extra_info['sample_id'] == 'train-000000' and 'question' in extra_info\n"
        "    return {'score': 0.5, 'length': len(solution_str), 'gold': ground_truth}\n")
    task = MathProblemsTask(reward_weights={"custom": 0.5, "format2": 2.0},
                            custom_reward_function={"path": str(path)})
    reward, outcome, metrics = reply_to(task, "seven")
    assert (reward, outcome) == (0.5 * 0.5 + 2.0 * 0.0, Outcome.INCORRECT)
    # `custom` and its numbers last; the gold answer, a string, is not a figure
    assert list(metrics.items()) == [("accuracy", 0.0), ("boxed_answer", 0.0),
                                     ("format2", 0.0), ("custom", 0.5), ("custom/length", 5.0)]
    with pytest.raises(ValueError, match="empty"):  # the episode ends as task_error
        reply_to(task, "")


def test_verl_reward_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="custom_reward_function.path"):
        MathProblemsTask(custom_reward_function={"path": str(tmp_path / "none.py")})
    (tmp_path / "r.py").write_text("x = 1\n")
    with pytest.raises(AttributeError, match="custom_reward_function.name"):
        MathProblemsTask(custom_reward_function={"path": str(tmp_path / "r.py")})


def test_unknown_reward_name_lists_the_available_ones() -> None:
    with pytest.raises(ValueError, match="reward_weights: unknown reward functions.*cosine"):
        MathProblemsTask(reward_weights={"accuracy": 1.0, "acuracy": 1.0})


def test_parquet_file_with_fast_math_r1_columns(tmp_path: Path) -> None:
    parquet = pytest.importorskip("pyarrow.parquet", reason="pyarrow is the parquet extra")
    import pyarrow

    rows = {"problem": ["What is 6 * 7?", "Half of 9?", "1 + 1?"],
            "solution": ["42", "\\frac{9}{2}", "2"]}
    path = tmp_path / "fast_math.parquet"
    parquet.write_table(pyarrow.table(rows), path)
    task = MathProblemsTask(source="file", data_path=str(path), question_key="problem",
                            answer_key="solution", splits=Splits(num_validation=1))
    assert list(task.sample_ids("train")) == ["train-000000", "train-000001"]
    assert task.get_sample("validation-000000").data == {"question": "1 + 1?", "answer": "2"}
    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000001"})
    _, reward, _, _, _ = environment.step("It is \\boxed{4.5}")
    assert reward == 1.0  # math-verify: 4.5 equals 9/2


def test_a_data_line_that_is_not_json_is_named_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "problems.jsonl"
    path.write_text('{"question": "1 + 1", "answer": "2"}\n\n{"question": \n')
    with pytest.raises(ValueError, match=r"problems\.jsonl:3: invalid JSON"):
        load_rows(str(path), "question", "answer", gsm8k=False)


def test_a_hugging_face_dataset_folder_with_its_split_and_gsm8k_answers(tmp_path: Path) -> None:
    folder = tmp_path / "gsm8k_like"
    (folder / "data").mkdir(parents=True)
    rows = [{"question": f"What is {n} + {n}?", "answer": f"{n} + {n} = {2 * n}\n#### {2 * n}"}
            for n in range(4)]
    for split, part in (("train", rows[:3]), ("test", rows[3:])):
        (folder / "data" / f"{split}-00000-of-00001.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in part))
    task = MathProblemsTask(source="gsm8k", data_path=str(folder), splits=Splits(num_validation=1))
    assert task.get_sample("validation-000000").data == {"question": "What is 2 + 2?",
                                                          "answer": "4"}
    assert load_rows(str(folder), "question", "answer", gsm8k=True,
                     dataset_split="test") == (("What is 3 + 3?", "6"),)


def test_a_dataset_that_cannot_be_loaded_is_named_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network here; fail at once, not after retries
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"math data 'nobody/no-such-dataset' is not a "
                                                r"file, and as a Hugging Face dataset \(config "
                                                r"'main', split 'train'\) it could not be"):
        load_rows("nobody/no-such-dataset", "question", "answer", gsm8k=True,
                  dataset_config="main")
