"""Held-out DB-bench success split by whether a train problem asks the same query."""

from __future__ import annotations

from pathlib import Path

from src.report.db_bench_train_overlap import overlap_table, validation_ids_with_a_train_query
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill
from tests.report.test_evaluation_table import write


def small_task() -> DBBenchSingleSkill:
    return DBBenchSingleSkill(source="procedural", num_train=200, num_validation=44,
                              stratified_validation=True, seed=42)


def test_repeated_queries_are_exactly_those_of_train_problems() -> None:
    task = small_task()
    repeated = validation_ids_with_a_train_query(task)
    train = {task.get_sample(i).data["reference_sql"] for i in task.sample_ids("train")}
    for sample_id in task.sample_ids("validation"):
        assert (sample_id in repeated) == (task.get_sample(sample_id).data["reference_sql"]
                                           in train)
    assert 0 < len(repeated) < 44  # the generator's splits share some queries, not all


def test_table_counts_each_side(tmp_path: Path) -> None:
    task = small_task()
    repeated = validation_ids_with_a_train_query(task)
    # correct exactly on the validation problems whose query a train problem asks
    outcomes = [("select", "correct" if f"validation-{index:06d}" in repeated else "incorrect", 10)
                for index in range(44)]
    lines = overlap_table(task, {"run": write(tmp_path / "run.jsonl", outcomes)}).splitlines()
    count = len(repeated)
    assert lines[0] == "| validation problems | run |"
    assert lines[2].endswith(f"({count}/{count}) |")
    assert lines[3].endswith(f"(0/{44 - count}) |")
    assert lines[4].endswith(f"({count}/44) |")

