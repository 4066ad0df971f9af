"""One process at a time in a run folder: a second process is refused while the first
lives, the lock goes with the holder's death (SIGKILL too), a process the holder started
does not keep it, and the command refuses a held folder before writing anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from src.run_experiment import main
from src.storage.run_layout import LOCK_FILE
from src.storage.run_lock import RunFolderInUse, RunLock

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# holds the lock on argv[1], starts a process that outlives it where argv[2] says so (as
# a run starts its scoring worker), says "held <that pid or 0>" and waits to be killed
HOLDER = """
import subprocess, sys, time
from pathlib import Path
from src.storage.run_lock import RunLock
lock = RunLock(Path(sys.argv[1]))
child = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]).pid
         if sys.argv[2] == "child" else 0)
print("held", child, flush=True)
time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def hold(folder: Path, started: list[subprocess.Popen[str]], child: bool = False) -> int:
    """Start a process holding `folder`'s lock; the pid of the process it started (0:
    none)."""
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder),
                                "child" if child else "alone"], cwd=PROJECT_ROOT,
                               stdout=subprocess.PIPE, text=True)
    started.append(process)
    assert process.stdout is not None
    said, child = process.stdout.readline().split()
    assert said == "held"
    return int(child)


def test_a_second_process_is_refused_until_the_first_dies(
        tmp_path: Path, holder: list[subprocess.Popen[str]]) -> None:
    folder = tmp_path / "run"
    hold(folder, holder)
    with pytest.raises(RunFolderInUse, match=f"{folder} is in use: another process"):
        RunLock(folder)
    holder[0].send_signal(signal.SIGKILL)
    holder[0].wait()
    RunLock(folder).release()  # the kernel released the dead holder's lock


def test_holds_within_one_process_share_the_lock(tmp_path: Path,
                                                holder: list[subprocess.Popen[str]]) -> None:
    """A run crashed in this process and resumed by it (as the crash tests do) holds the
    folder twice; the lock goes with the last hold."""
    folder = tmp_path / "run"
    folder.mkdir()
    first, second = RunLock(folder), RunLock(folder)
    first.release()
    with pytest.raises(subprocess.CalledProcessError):  # still held: another process fails
        subprocess.run([sys.executable, "-c", HOLDER, str(folder), "alone"], cwd=PROJECT_ROOT,
                       check=True, capture_output=True, timeout=60)
    second.release()
    hold(folder, holder)  # free once both are released


def test_a_process_the_holder_started_does_not_keep_its_lock(
        tmp_path: Path, holder: list[subprocess.Popen[str]]) -> None:
    folder = tmp_path / "run"
    child = hold(folder, holder, child=True)
    try:
        with pytest.raises(RunFolderInUse):
            RunLock(folder)
        holder[0].send_signal(signal.SIGKILL)
        holder[0].wait()
        os.kill(child, 0)  # the child still lives ...
        RunLock(folder).release()  # ... and the folder is free
    finally:
        os.kill(child, signal.SIGKILL)


def test_the_command_refuses_a_folder_another_process_trains(
        tmp_path: Path, holder: list[subprocess.Popen[str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    hold(folder, holder)
    config = yaml.safe_load((PROJECT_ROOT / "configs" / "assignments" /
                             "smoke_oracle_math.yaml").read_text())
    config["assignment_config"]["output_dir"] = str(folder)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["--config_path", str(path), "--no_progress"]) == 2
    assert "is in use: another process is training this run" in capsys.readouterr().err
    assert [entry.name for entry in folder.iterdir()] == [LOCK_FILE]  # nothing written
    # once the holder is gone, the same command runs the run
    holder[0].kill()
    holder[0].wait()
    assert main(["--config_path", str(path), "--no_progress"]) == 0
    assert (folder / "runs.jsonl").is_file()
