"""Evaluation logs the task's own metrics on the validation split, like training metrics."""

from __future__ import annotations

import json
from pathlib import Path

from src.run import evaluation as evaluation_module
from src.run_experiment import main
from tests.conftest import PROJECT_ROOT


def test_oracle_run_logs_accuracy_format_rate_and_length(tmp_path: Path) -> None:
    config = PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_math.yaml"
    assert main(["--config_path", str(config), "--output_dir", str(tmp_path / "run"),
                 "--no_progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evaluation = [row for row in rows if "eval/accuracy" in row]
    assert len(evaluation) == 1 and evaluation[0]["step"] == 4  # at_end: 32 samples / 8
    assert evaluation[0]["eval/accuracy"] == 1.0
    assert evaluation[0]["eval/boxed_answer"] == 1.0
    assert evaluation[0]["eval/completions/mean_length"] == 0.0  # the oracle samples no tokens
    episodes = [json.loads(line) for line in
                (tmp_path / "run" / "evaluation" / "step-000004.jsonl").open()]
    assert len(episodes) == 8 and all(e["outcome"] == "correct" for e in episodes)
    training = [row for row in rows if "rollout/accuracy" in row]
    assert len(training) == 4 and all(row["rollout/success_rate"] == 1.0 for row in training)


def test_zero_batches_only_evaluate(tmp_path: Path, capsys) -> None:
    text = (PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_math.yaml").read_text()
    config = tmp_path / "evaluate.yaml"
    config.write_text(text.replace("num_epochs: 1}", "num_epochs: 1, max_batches: 0}")
                      .replace("evaluation: {at_end: true}", "evaluation: {at_start: true}"))
    output = tmp_path / "run"
    assert main(["--config_path", str(config), "--output_dir", str(output),
                 "--no_progress"]) == 0
    rows = [json.loads(line) for line in (output / "metrics.jsonl").open()]
    assert [row["step"] for row in rows] == [0] and rows[0]["eval/accuracy"] == 1.0
    assert (output / "runs.jsonl").read_text() == ""  # no training episode
    assert json.loads((output / "run_state.json").read_text())["finished"]
    printed = capsys.readouterr().out
    assert "100.0% [67.6, 100.0] (8/8) at step 0\n" in printed
    assert "{}" not in printed  # no empty training summary


def test_selection_split_is_evaluated_beside_validation(tmp_path: Path) -> None:
    """The oracle on DB-bench, both held-out splits: each its own episodes, file and prefix."""
    text = (PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_db_bench.yaml").read_text()
    config = tmp_path / "selection.yaml"
    config.write_text(text.replace("num_validation: 22,", "num_validation: 22, num_selection: 6,")
                      .replace("evaluation: {at_end: true}",
                               "evaluation: {at_start: true, splits: [selection, validation]}")
                      .replace("num_epochs: 1}", "num_epochs: 1, max_batches: 0}"))
    output = tmp_path / "run"
    assert main(["--config_path", str(config), "--output_dir", str(output),
                 "--no_progress"]) == 0
    [row] = [json.loads(line) for line in (output / "metrics.jsonl").open()]
    assert row["selection/episodes"] == 6.0 and row["eval/episodes"] == 22.0
    assert row["selection/success_rate"] == row["eval/success_rate"] == 1.0
    selection = [json.loads(line)["sample_id"] for line in
                 (output / "evaluation" / "selection" / "step-000000.jsonl").open()]
    validation = [json.loads(line)["sample_id"] for line in
                  (output / "evaluation" / "step-000000.jsonl").open()]
    assert selection == [f"selection-{index:06d}" for index in range(6)]
    assert validation == [f"validation-{index:06d}" for index in range(22)]


def test_a_selection_split_the_task_does_not_draw_is_refused(tmp_path: Path, capsys) -> None:
    text = (PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_math.yaml").read_text()
    config = tmp_path / "selection.yaml"
    config.write_text(text.replace("evaluation: {at_end: true}",
                                   "evaluation: {at_end: true, splits: [selection]}"))
    assert main(["--config_path", str(config), "--output_dir", str(tmp_path / "run"),
                 "--no_progress"]) == 2
    error = capsys.readouterr().err
    line = 1 + config.read_text().splitlines().index("  evaluation: {at_end: true, "
                                                      "splits: [selection]}")
    assert (f"{config}:{line}, key 'assignment_config.evaluation.splits': names 'selection', but "
            "the task MathProblemsTask draws no selection samples") in error
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


def test_a_task_that_cannot_be_built_is_named_when_selection_is_checked(tmp_path: Path,
                                                                         capsys) -> None:
    """The selection check builds the task at planning: its own errors become config
    errors with the task's key, not tracebacks."""
    text = (PROJECT_ROOT / "configs" / "assignments" / "db_bench_grpo.yaml").read_text()
    config = tmp_path / "selection.yaml"
    config.write_text(text.replace("source: procedural", "source: agentbench"))
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    error = capsys.readouterr().err
    assert "key 'assignment_config.task': the task cannot be built: num_selection: 88" in error


def test_evaluation_batch_size_sets_the_episodes_rolled_out_together(
        tmp_path: Path, monkeypatch) -> None:
    """A spy around the real rollout records each evaluation chunk: by default a rollout
    batch (8 x 2 = 16, so all 8 problems at once), with `batch_size: 3` chunks of 3, 3, 2,
    and the same outcomes either way."""
    chunks: list[int] = []

    def spy(samples, *args, **kwargs):
        chunks.append(len(samples))
        return roll_out(samples, *args, **kwargs)

    roll_out = evaluation_module.roll_out_seeded
    monkeypatch.setattr(evaluation_module, "roll_out_seeded", spy)
    text = (PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_math.yaml").read_text()
    text = text.replace("num_epochs: 1}", "num_epochs: 1, max_batches: 0}")
    figures = []
    for evaluation, expected in (("{at_start: true}", [8]),
                                 ("{at_start: true, batch_size: 3}", [3, 3, 2])):
        config = tmp_path / "evaluate.yaml"
        config.write_text(text.replace("evaluation: {at_end: true}",
                                       f"evaluation: {evaluation}"))
        output = tmp_path / f"run-{len(figures)}"
        chunks.clear()
        assert main(["--config_path", str(config), "--output_dir", str(output),
                     "--no_progress"]) == 0
        assert chunks == expected
        figures.append((output / "evaluation" / "step-000000.jsonl").read_text())
    assert figures[0] == figures[1]
