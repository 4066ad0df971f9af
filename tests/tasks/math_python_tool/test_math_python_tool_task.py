"""Math with a Python tool: seeded problems a small model cannot do in its head, split
without overlap, scored as the math task scores answers, and run end to end by its oracle
through the real sandbox."""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator
from functools import reduce
from pathlib import Path

import psutil
import pytest

from src.records.episode import Outcome
from src.run_experiment import main
from src.tasks.instance.math_python_tool.task import MathPythonToolTask, is_held_out
from src.tasks.splits import Splits
from tests.conftest import PROJECT_ROOT
from tests.sandboxes.processes import note_present_processes, sandbox_processes

SMOKE = PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_math_python_tool.yaml"


@pytest.fixture(scope="module")
def task() -> Iterator[MathPythonToolTask]:
    family = MathPythonToolTask(splits=Splits(num_train=64, num_validation=32, seed=3))
    yield family
    family.close()


def value(expression: str) -> int:
    """The value of `a * b` or `a + b + ...`, computed here without eval."""
    if " * " in expression:
        return reduce(operator.mul, map(int, expression.split(" * ")))
    return sum(map(int, expression.split(" + ")))


def test_problems_are_seeded_hard_arithmetic_with_disjoint_splits(
        task: MathPythonToolTask) -> None:
    again = MathPythonToolTask(splits=Splits(num_train=64, num_validation=32, seed=3))
    other_seed = MathPythonToolTask(splits=Splits(num_train=64, num_validation=32, seed=4))
    try:
        train = [task.get_sample(i) for i in task.sample_ids("train")]
        validation = [task.get_sample(i) for i in task.sample_ids("validation")]
        assert [again.get_sample(s.sample_id) for s in train] == train
        assert [other_seed.get_sample(s.sample_id) for s in train] != train
    finally:
        again.close()
        other_seed.close()
    assert task.sample_ids("selection") == []
    for sample in train + validation:
        expression = sample.data["expression"]
        assert sample.data["question"] == f"What is {expression}?"
        assert sample.data["answer"] == str(value(expression))
        operands = expression.replace("*", "+").split(" + ")
        if sample.category == "product":
            assert len(operands) == 2 and all(100 <= int(n) <= 999 for n in operands)
        else:
            assert sample.category == "sum" and len(operands) == 4
            assert all(100 <= int(n) <= 99_999 for n in operands)
    assert {s.category for s in train} == {"product", "sum"}

    def fact(sample) -> str:
        """The arithmetic as the task hashes it: operands sorted, in any order asked."""
        symbol = "*" if sample.category == "product" else "+"
        operands = sorted(map(int, sample.data["expression"].split(f" {symbol} ")))
        return f" {symbol} ".join(map(str, operands))

    assert not {fact(s) for s in train} & {fact(s) for s in validation}
    assert all(is_held_out(fact(s)) for s in validation)
    assert not any(is_held_out(fact(s)) for s in train)
    with pytest.raises(KeyError, match="split 'train' has 64"):
        task.get_sample("train-000064")


def test_a_wrong_but_well_formed_answer_earns_the_small_credit(
        task: MathPythonToolTask) -> None:
    environment = task.new_episode()
    try:
        environment.reset(options={"sample_id": "train-000000"})
        _, reward, terminated, _, info = environment.step("It is \\boxed{12}.")
        assert terminated and reward == pytest.approx(0.1)
        assert info["outcome"] is Outcome.INCORRECT and info["metrics"]["used_tool"] == 0
        environment.reset(options={"sample_id": "train-000000"})
        _, reward, *_ = environment.step("I think it is big.")
        assert reward == 0.0
    finally:
        environment.close()


def test_settings_that_cannot_work_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown reward functions \\['speed'\\]"):
        MathPythonToolTask(reward_weights={"speed": 1.0})
    with pytest.raises(ValueError, match="tools: one or more of \\['bash', 'python'\\]"):
        MathPythonToolTask(tools=["python", "python"])
    with pytest.raises(ValueError, match="exceeds the 20000 characters an observation"):
        MathPythonToolTask(max_tool_output_chars=15_000, max_calls_per_reply=2)


def test_the_oracle_runs_end_to_end_through_the_sandbox(tmp_path: Path) -> None:
    note_present_processes()
    assert main(["--config_path", str(SMOKE), "--output_dir", str(tmp_path / "run"),
                 "--no_progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    [evaluation] = [row for row in rows if "eval/accuracy" in row]
    assert evaluation["eval/accuracy"] == 1.0 and evaluation["eval/used_tool"] == 1.0
    assert evaluation["eval/sandbox/ok"] == 1.0 and evaluation["eval/tool_errors"] == 0.0
    episodes = [json.loads(line) for line in (tmp_path / "run" / "runs.jsonl").open()]
    assert len(episodes) == 16 and all(e["outcome"] == "correct" for e in episodes)
    assert all(e["turns"] == 2 and e["chat"][2]["content"].startswith("<tool_response>\n")
               for e in episodes)
    # every sandbox of the run is closed with it
    psutil.wait_procs(sandbox_processes(), timeout=5)
    assert sandbox_processes() == []


def test_a_dry_run_checks_that_this_host_can_make_the_sandbox(tmp_path: Path, capsys) -> None:
    assert main(["--config_path", str(SMOKE), "--dry_run"]) == 0
    config = tmp_path / "no_bwrap.yaml"
    config.write_text(SMOKE.read_text().replace("sandbox: {pool_size: 4,",
                                                "sandbox: {bwrap_path: /no/bwrap, pool_size: 4,"))
    capsys.readouterr()
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    error = capsys.readouterr().err
    assert "key 'assignment_config.task.parameters.sandbox'" in error
    assert "bwrap_path '/no/bwrap'" in error
