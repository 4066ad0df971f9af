"""The stopping step chosen on the selection split, and the validation figure it reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.db_bench_learning.stopping_step import chosen_step, stopping_step_table
from src.records.chat import ChatMessage
from src.records.episode import EpisodeRecord


def write(path: Path, wins: int, total: int) -> None:
    rows = [EpisodeRecord(sample_id=f"selection-{index:06d}", group_index=0, batch_index=0,
                          category="c", status="completed",
                          outcome="correct" if index < wins else "incorrect", reward=0.0,
                          turns=1, prompt_tokens=1, completion_tokens=1,
                          chat=[ChatMessage(role="user", content="q")])
            for index in range(total)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row.model_dump(mode="json")) + "\n" for row in rows))


def test_the_earliest_step_with_the_most_selection_successes() -> None:
    assert chosen_step({0: (2, 8), 5: (4, 8), 10: (4, 8), 15: (3, 8)}) == 5
    assert chosen_step({0: (5, 8), 5: (4, 8)}) == 0  # training may not have helped


def test_table_reports_the_validation_figure_of_the_chosen_step(tmp_path: Path) -> None:
    folder = tmp_path / "evaluation"
    for step, (selected, validated) in {0: (1, 2), 5: (3, 1), 10: (2, 4)}.items():
        write(folder / "selection" / f"step-{step:06d}.jsonl", selected, 4)
        write(folder / f"step-{step:06d}.jsonl", validated, 4)
    lines = stopping_step_table(tmp_path).splitlines()
    assert lines[:2] == ["| step | selection | validation |", "| --- | --- | --- |"]
    assert lines[3] == "| 5 (chosen) | 75.0% [30.1, 95.4] (3/4) | 25.0% [4.6, 69.9] (1/4) |"
    assert lines[-1] == "chosen step 5: validation 25.0% [4.6, 69.9] (1/4)"
    # the validation figures, though higher at step 10, took no part in the choice


def test_a_run_without_selection_evaluations_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no selection evaluations"):
        stopping_step_table(tmp_path)
