"""Where a run may start and what a resume accepts: a folder that committed no batch starts
afresh with a corrected config, a resume-safe change is recorded in the stored config, a
folder that is not a run is refused untouched (and cleaning a run's folder drops only the
run's own temporaries), and a committed log that does not parse is refused before any
work, naming the file and the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.run.crash_in_batch import run_until_crash
from tests.run_folders import run_command

ORACLE_MATH = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 42
  rollout: {{batch_size: 2, group_size: 2, max_batches: {max_batches}}}
  evaluation: {{at_start: true, every_n_batches: 1}}
  task:
    name: math_problems
    parameters: {{num_train: {num_train}, num_validation: 2}}
  agent:
    name: oracle_agent
"""


def write_config(folder: Path, output: Path, max_batches: int = 3, num_train: int = 8,
                 name: str = "assignment.yaml") -> Path:
    path = folder / name
    path.write_text(ORACLE_MATH.format(output=output, max_batches=max_batches,
                                       num_train=num_train))
    return path


def stored(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())["assignment_config"]


def state(run: Path) -> dict:
    return json.loads((run / "run_state.json").read_text())


def test_a_folder_that_committed_no_batch_starts_afresh_with_a_corrected_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run_until_crash(write_config(tmp_path, run, num_train=8), batch_index=0)
    assert state(run)["completed_batches"] == 0
    corrected = write_config(tmp_path, run, num_train=12, name="corrected.yaml")
    assert run_command(corrected) == 0, capsys.readouterr().err
    assert (f"{run} committed no batch: starting afresh with {corrected} (changed: "
            "assignment_config.task.parameters.num_train)") in capsys.readouterr().out
    assert stored(run)["task"]["parameters"]["num_train"] == 12
    assert state(run)["completed_batches"] == 3 and state(run)["finished"]
    # the logs hold the new run's rows only: 3 batches of 2 samples x 2
    assert len((run / "runs.jsonl").read_text().splitlines()) == 12


def test_a_changed_max_batches_on_resume_is_recorded_in_the_stored_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run_until_crash(write_config(tmp_path, run, max_batches=3), batch_index=1)
    assert state(run)["completed_batches"] == 1
    assert run_command(write_config(tmp_path, run, max_batches=2)) == 0
    assert "assignment_config.rollout.max_batches" in capsys.readouterr().out
    assert stored(run)["rollout"]["max_batches"] == 2
    assert state(run)["completed_batches"] == 2 and state(run)["finished"]


def test_a_run_stored_before_a_setting_existed_resumes_at_its_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    config = write_config(tmp_path, run, max_batches=2)
    run_until_crash(config, batch_index=1)
    # the stored config as code without faults.max_hung_calls wrote it
    document = yaml.safe_load((run / "config.yaml").read_text())
    del document["assignment_config"]["rollout"]["faults"]["max_hung_calls"]
    (run / "config.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    assert run_command(config) == 0, capsys.readouterr().err
    assert ("the resume takes them at their defaults: "
            "assignment_config.rollout.faults.max_hung_calls") in capsys.readouterr().out
    assert "max_hung_calls" in stored(run)["rollout"]["faults"]
    assert state(run)["completed_batches"] == 2 and state(run)["finished"]


def test_an_existing_folder_that_is_not_a_run_is_refused_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "papers"
    folder.mkdir()
    files = {"notes.txt": "mine", ".draft.tmp": "mine too", "scratch.tmp": "and this"}
    for name, text in files.items():
        (folder / name).write_text(text)
    assert run_command(write_config(tmp_path, folder)) == 2
    assert (f"{folder} holds files (.draft.tmp, notes.txt, scratch.tmp) but no run "
            "(no run_state.json)") in capsys.readouterr().err
    assert {path.name: path.read_text() for path in folder.iterdir()} == files


def test_the_file_system_root_is_refused_as_an_output_dir(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(path.name for path in Path("/").iterdir())
    assert run_command(write_config(tmp_path, Path("/"))) == 2
    assert "/ holds files" in capsys.readouterr().err
    assert sorted(path.name for path in Path("/").iterdir()) == before


def test_resuming_drops_the_runs_own_temporaries_and_no_other_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_until_crash(write_config(tmp_path, run), batch_index=1)
    leftover = run / ".run_state.json.a1b2c3d4.tmp"  # a kill in an atomic write
    leftover.write_text("{")
    mine = [run / ".notes.tmp", run / "draft.tmp", run / ".config.yaml.tmp"]
    for path in mine:
        path.write_text("kept")
    assert run_command(write_config(tmp_path, run)) == 0
    assert not leftover.exists()
    assert all(path.read_text() == "kept" for path in mine)


def nul_bytes_in_line(path: Path, line: int) -> None:
    """Overwrite the middle of `line` (from 1) with NUL bytes, keeping the file's size."""
    data = bytearray(path.read_bytes())
    start = sum(len(row) for row in data.splitlines(keepends=True)[:line - 1])
    data[start + 5:start + 25] = b"\0" * 20
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("name", "line"), [
    ("runs.jsonl", 3),
    ("metrics.jsonl", 2),
    ("evaluation/step-000001.jsonl", 1),
])
def test_a_committed_log_that_does_not_parse_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, line: int) -> None:
    run = tmp_path / "run"
    config = write_config(tmp_path, run)
    run_until_crash(config, batch_index=2)
    assert state(run)["completed_batches"] == 2
    nul_bytes_in_line(run / name, line)
    damaged = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    for _ in range(2):  # refused again, the same way, on every rerun
        assert run_command(config) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"run folder error: {run / name}:{line}: "), error
        assert "restore the file from a copy of the run folder" in error
        assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()
                } == damaged
