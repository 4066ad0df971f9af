from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from src.tasks.answers import MAX_ANSWER_CHARS
from src.tasks.instance.math_problems.problems import gsm8k_final_answer
from src.tasks.instance.math_problems.rewards import (
    CosineScaling,
    accuracy,
    boxed_answer,
    boxed_number,
    format2,
    length_rewards,
    z_normalise,
)
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.splits import Splits


def test_accuracy_correct_wrong_unparseable() -> None:
    assert accuracy("so \\boxed{12}", "12") == 1.0
    assert accuracy("so \\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert accuracy("so \\boxed{13}", "12") == 0.0
    assert accuracy("the answer is 12", "12") == 0.0  # only a boxed answer counts
    assert accuracy("\\boxed{", "12") == 0.0
    assert accuracy("\\boxed{}", "12") == 0.0


def test_accuracy_reads_the_answer_after_think() -> None:
    assert accuracy("<think>maybe \\boxed{3}</think> final \\boxed{4}", "4") == 1.0
    assert accuracy("<think>maybe \\boxed{4}</think> final \\boxed{3}", "4") == 0.0


def test_accuracy_works_in_worker_threads() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(accuracy, ["\\boxed{7}", "\\boxed{8}"], ["7", "7"]))
    assert results == [1.0, 0.0]


def test_a_power_tower_is_wrong_within_seconds_even_in_a_thread() -> None:
    """`9^{9^{9}}` once kept sympy busy for ever: math-verify's SIGALRM timeouts cannot
    work outside the main thread, so they were off. A subprocess, because the runaway
    big-integer power holds the GIL: a hang must fail the test, not stop it."""
    script = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from src.tasks.instance.math_problems.rewards import accuracy\n"
        "with ThreadPoolExecutor(1) as pool:\n"
        # the second reply: the overrunning worker was replaced
        "    print(list(pool.map(accuracy, ['\\\\boxed{9^{9^{9}}}', '\\\\boxed{7}'],"
        " ['7', '7'])))\n")
    try:
        result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                                text=True, timeout=90, cwd=Path(__file__).parents[2])
    except subprocess.TimeoutExpired:
        pytest.fail("accuracy still running after 90 s")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0.0, 1.0]"


def test_an_answer_longer_than_the_bound_is_wrong_without_being_checked() -> None:
    # math-verify's time grows with the answer (a megabyte of digits ran past its 5 s
    # bound, and the worker it overran was replaced): longer answers are wrong unread
    long = "1" * (MAX_ANSWER_CHARS + 1)
    assert accuracy(f"\\boxed{{{long}}}", long) == 0.0
    assert accuracy(f"\\boxed{{{long[:-1]}}}", long[:-1]) == 1.0


def test_boxed_number_and_format2() -> None:
    assert boxed_number("\\boxed{41}") == 1.0
    assert boxed_number("\\boxed{x+1}") == 0.0
    assert format2("<think>\\boxed{3}</think>") == 1.0
    assert format2("<think>work</think>\\boxed{3}") == 0.0
    assert format2("\\boxed{3}") == 0.0


def test_cosine_scaling_at_the_pinned_lengths() -> None:
    cosine = CosineScaling(max_len=100, clip_len=True)
    assert cosine(True, 0) == pytest.approx(1.0)
    assert cosine(True, 50) == pytest.approx(0.55)
    assert cosine(True, 150) == pytest.approx(0.1)
    assert cosine(False, 0) == pytest.approx(-1.0)
    assert cosine(False, 50) == pytest.approx(-0.55)
    assert cosine(False, 150) == pytest.approx(-0.1)
    unclipped = CosineScaling(max_len=100, clip_len=False)
    assert unclipped(True, 150) == pytest.approx(0.55)  # cos(1.5 pi) = 0


def test_cosine_seed_values_at_zero_half_and_beyond_max_len() -> None:
    seed = CosineScaling()  # 1.0 / 0.1 / -0.1 / -1.0, max_len 30000, clip_len on
    assert seed(True, 0) == pytest.approx(1.0) and seed(False, 0) == pytest.approx(-1.0)
    assert seed(True, 15000) == pytest.approx(0.55) and seed(False, 15000) == pytest.approx(-0.55)
    assert seed(True, 45000) == pytest.approx(0.1) and seed(False, 45000) == pytest.approx(-0.1)
    with pytest.raises(ValueError):
        CosineScaling(max_len=0)


def test_length_reward_kimi() -> None:
    # lengths 10, 20, 30: lambda = 0.5, 0, -0.5
    assert length_rewards([True, True, True], [10, 20, 30]) == pytest.approx([0.5, 0.0, -0.5])
    assert length_rewards([False, False, False], [10, 20, 30]) == pytest.approx([0.0, 0.0, -0.5])
    assert length_rewards([True, False], [7, 7]) == [0.0, 0.0]


def test_z_normalise_per_prompt() -> None:
    # mean 2, unbiased std 1
    assert z_normalise([1.0, 2.0, 3.0]) == pytest.approx([-1.0, 0.0, 1.0], abs=1e-5)
    assert z_normalise([0.5, 0.5]) == [0.0, 0.0]
    assert z_normalise([0.7]) == [0.7]


def test_boxed_answer_is_the_format_rate() -> None:
    assert boxed_answer("so \\boxed{12}") == 1.0
    assert boxed_answer("so \\boxed{ }") == 0.0
    assert boxed_answer("<think>\\boxed{1}</think> no answer") == 0.0


def test_gsm8k_gold_answers_score_one(shared_data: Path) -> None:
    path = shared_data / "gsm8k" / "train-300.jsonl"
    task = MathProblemsTask(source="gsm8k", data_path=str(path), splits=Splits(num_validation=20))
    assert len(task.sample_ids("train")) == 280
    rows = [json.loads(line) for line in path.read_text().split("\n") if line.strip()]
    for row, sample_id in zip(rows, list(task.sample_ids("train")) + list(
            task.sample_ids("validation")), strict=True):
        gold = gsm8k_final_answer(row["answer"])
        environment = task.new_episode()
        environment.reset(options={"sample_id": sample_id})
        _, reward, terminated, _, info = environment.step(f"The answer is \\boxed{{{gold}}}.")
        assert reward == 1.0 and terminated, (sample_id, gold)


def test_malformed_data_row_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: row lacks"):
        MathProblemsTask(source="gsm8k", data_path=str(path), splits=Splits(num_validation=1))


def test_procedural_samples_are_seeded() -> None:
    one, two = (MathProblemsTask(splits=Splits(seed=3), levels=[1, 4]) for _ in range(2))
    assert one.get_sample("train-000005") == two.get_sample("train-000005")
    assert one.get_sample("train-000000") != one.get_sample("validation-000000")


def arithmetic(question: str) -> tuple[int | str, ...]:
    """The fact a procedural question asks (its two numbers and operator), operands
    sorted where their order is free."""
    a, b = (int(number) for number in re.findall(r"\d+", question))
    if " - " in question:
        return (a, "-", b)
    return (*sorted((a, b)), "*" if " * " in question else "+")


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_procedural_validation_asks_no_fact_that_train_asks(level: int) -> None:
    """Level 1 has only 100 questions: drawn independently, most validation questions
    were also train questions (46 of the quickstart's 64); swapped operands (3 + 4, 4 + 3)
    and the prompts' worked example (3 + 4) are the same fact."""
    task = MathProblemsTask(levels=[level],
                            splits=Splits(num_train=400, num_validation=100, seed=7))
    train = {arithmetic(task.get_sample(sample_id).data["question"])
             for sample_id in task.sample_ids("train")}
    validation = {arithmetic(task.get_sample(sample_id).data["question"])
                  for sample_id in task.sample_ids("validation")}
    assert train.isdisjoint(validation)
    assert (3, 4, "+") not in validation
    assert len(validation) > 1  # the held-out side is not one repeated question


@pytest.mark.slow
def test_accuracy_works_in_a_threaded_ray_actor() -> None:
    ray = pytest.importorskip("ray")

    @ray.remote(max_concurrency=2)  # methods run in the actor's worker threads
    class Scorer:
        def score(self, completion: str, gold: str) -> float:
            return accuracy(completion, gold)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        scorer = Scorer.remote()
        results = ray.get([scorer.score.remote(f"\\boxed{{{value}}}", "7") for value in (7, 8, "7.0")])
    finally:
        ray.shutdown()
    assert results == [1.0, 0.0, 1.0]
