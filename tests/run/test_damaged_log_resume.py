"""A log shorter than its commit point is refused on resume, not padded: cutting runs.jsonl
or metrics.jsonl "back" to an offset past its end would extend it with NUL bytes, the next
batch would be committed on top of them, and every later resume would fail."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from src.storage.files import JsonlLog
from tests.conftest import PROJECT_ROOT
from tests.run.test_resume_after_kill import ASSIGNMENT
from tests.run_folders import kill_after_commits, process_command


@pytest.mark.parametrize(("log", "offset_key"), [("runs.jsonl", "runs_bytes"),
                                                 ("metrics.jsonl", "metrics_bytes")])
def test_a_log_shorter_than_its_commit_point_is_refused_and_left_as_it_is(
        tmp_path: Path, log: str, offset_key: str) -> None:
    output = tmp_path / "run"
    config = tmp_path / "assignment.yaml"
    config.write_text(ASSIGNMENT.format(output=output))
    kill_after_commits(config, output, commits=2)
    committed = json.loads((output / "run_state.json").read_text())[offset_key]
    path = output / log
    damaged = path.read_bytes()[:committed // 2]  # say a restore from an older copy
    path.write_bytes(damaged)

    result = subprocess.run(process_command(config), cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert f"{path} holds {len(damaged)} bytes" in result.stderr
    assert f"committed {committed}" in result.stderr
    assert "--new_run" in result.stderr
    assert path.read_bytes() == damaged
    assert json.loads((output / "run_state.json").read_text())[offset_key] == committed


def test_cutting_a_log_back_past_its_end_is_refused(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "runs.jsonl")
    log.append([{"a": 1}])
    size = log.size
    with pytest.raises(ValueError, match=rf"runs.jsonl holds {size} bytes, fewer than the "
                                         rf"{size + 10}"):
        log.truncate(size + 10)
    assert log.size == size
    log.truncate(0)
    assert log.size == 0
