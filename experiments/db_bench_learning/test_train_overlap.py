"""Held-out DB-bench success split by whether a train problem asks the same query."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.db_bench_learning.train_overlap import (
    overlap_table,
    query,
    validation_ids_with_a_train_query,
)
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill, DBBenchSplits
from src.tasks.task import split_sample_id
from tests.report.test_evaluation_table import write


def small_task() -> DBBenchSingleSkill:
    return DBBenchSingleSkill(source="procedural",
                              splits=DBBenchSplits(num_train=200, num_validation=44, seed=42),
                              stratified_validation=True)


def test_a_query_is_its_sql_whatever_the_table_is_called() -> None:
    sample = small_task().get_sample(split_sample_id("validation", 3))
    name = sample.data["table"]["name"]
    assert name not in query(sample) and "<table>" in query(sample)
    renamed = sample.model_copy(update={"data": {
        **sample.data, "table": {**sample.data["table"], "name": "other name"},
        "reference_sql": sample.data["reference_sql"].replace(name, "other name")}})
    assert query(renamed) == query(sample)


def test_repeated_queries_are_exactly_those_of_train_problems() -> None:
    task = small_task()
    repeated = validation_ids_with_a_train_query(task)
    train = {query(task.get_sample(sample_id)) for sample_id in task.sample_ids("train")}
    for sample_id in task.sample_ids("validation"):
        assert (sample_id in repeated) == (query(task.get_sample(sample_id)) in train)
    assert 0 < len(repeated) < 44  # the generator's splits share some queries, not all


def test_table_counts_each_side(tmp_path: Path) -> None:
    task = small_task()
    repeated = validation_ids_with_a_train_query(task)
    # correct exactly on the validation problems whose query a train problem asks
    outcomes = [("select", "correct" if split_sample_id("validation", index) in repeated
                 else "incorrect", 10) for index in range(44)]
    lines = overlap_table(task, {"run": write(tmp_path / "run.jsonl", outcomes)}).splitlines()
    count = len(repeated)
    assert lines[0] == "| validation problems | run |"
    assert lines[2].endswith(f"({count}/{count}) |")
    assert lines[3].endswith(f"(0/{44 - count}) |")
    assert lines[4].endswith(f"({count}/44) |")


def test_another_configs_evaluation_is_refused(tmp_path: Path) -> None:
    larger = write(tmp_path / "run.jsonl", [("select", "correct", 10)] * 45)
    with pytest.raises(ValueError, match=r"validation-000044 is not among the config's 44"):
        overlap_table(small_task(), {"run": larger})
