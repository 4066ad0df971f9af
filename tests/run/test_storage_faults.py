"""A full disk or a read-only output folder mid-run: a clear error, exit status 3, the last
committed state intact, and the same command resumes once the folder is writable again.

The folder is a real small file system (a tmpfs this test mounts), so these tests need the
right to mount one (root in a container that allows it) and skip where it is missing; a
non-root user gets the read-only case through file permissions instead."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.run.test_resume_after_kill import ASSIGNMENT
from tests.run_folders import process_command, run_in_new_process

NUM_TRAIN = 24
GROUP_SIZE = 2


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for this test."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                              str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); "
                    "a full disk needs a real small file system")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def start_and_wait_for_commits(config: Path, output: Path, batches: int
                               ) -> subprocess.Popen[str]:
    process = subprocess.Popen(process_command(config), cwd=PROJECT_ROOT, text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    state_file = output / "run_state.json"
    while time.time() < deadline:
        if (state_file.exists()
                and json.loads(state_file.read_text())["completed_batches"] >= batches):
            return process
        if process.poll() is not None:
            raise AssertionError(f"the run ended early: {process.stderr.read()}")
        time.sleep(0.01)
    process.kill()
    raise AssertionError("the run did not commit its first batches in 120 s")


def fill(folder: Path) -> Path:
    """Write a file into `folder` until its file system has no space left."""
    filler = folder / "filler"
    chunk = bytes(4096)
    handle = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(handle, chunk)
    except OSError:
        pass
    finally:
        os.close(handle)
    return filler


def assert_refused_then_resumed(process: subprocess.Popen[str], config: Path, output: Path,
                                expected_reason: str, make_writable: Callable[[], None]) -> None:
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 3, stderr[-2000:]
    assert "storage error: cannot write" in stderr
    assert expected_reason in stderr
    assert "Traceback" not in stderr
    state = json.loads((output / "run_state.json").read_text())
    assert not state["finished"]
    assert f"completed_batches {state['completed_batches']}" in stderr
    committed_rows = (output / "runs.jsonl").read_bytes()[:state["runs_bytes"]].splitlines()
    assert len(committed_rows) == state["completed_batches"] * 4 * GROUP_SIZE

    make_writable()
    run_in_new_process(config)
    rows = [json.loads(line) for line in (output / "runs.jsonl").read_text().split("\n") if line.strip()]
    assert [json.dumps(row).encode() for row in rows[:len(committed_rows)]] == [
        json.dumps(json.loads(row)).encode() for row in committed_rows]
    counts = Counter((row["sample_id"], row["group_index"]) for row in rows)
    assert len(counts) == NUM_TRAIN * GROUP_SIZE and set(counts.values()) == {1}
    assert json.loads((output / "run_state.json").read_text())["finished"]


def test_a_full_disk_mid_run_is_a_clear_error_and_the_run_resumes(
        small_filesystem: Path, tmp_path: Path) -> None:
    output = small_filesystem / "run"
    config = tmp_path / "assignment.yaml"
    config.write_text(ASSIGNMENT.format(output=output))
    process = start_and_wait_for_commits(config, output, batches=2)
    filler = fill(small_filesystem)
    assert_refused_then_resumed(process, config, output, "No space left on device",
                                lambda: filler.unlink())


def test_a_read_only_output_folder_mid_run_is_a_clear_error_and_the_run_resumes(
        tmp_path: Path) -> None:
    config = tmp_path / "assignment.yaml"
    if os.geteuid() == 0:  # root writes through permissions: make the file system read-only
        disk = tmp_path / "disk"
        disk.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)],
                          capture_output=True).returncode != 0:
            pytest.skip("running as root without the right to mount: a read-only folder "
                        "cannot be made")
        output, reason = disk / "run", "Read-only file system"

        def make_read_only() -> None:
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)

        def make_writable() -> None:
            subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    else:
        output, reason = tmp_path / "run", "Permission denied"

        def set_mode(mode: int) -> None:
            for folder in [output, *(path for path in output.rglob("*") if path.is_dir())]:
                folder.chmod(mode)

        def make_read_only() -> None:
            set_mode(0o555)

        def make_writable() -> None:
            set_mode(0o755)
    config.write_text(ASSIGNMENT.format(output=output))
    try:
        process = start_and_wait_for_commits(config, output, batches=2)
        make_read_only()
        assert_refused_then_resumed(process, config, output, reason, make_writable)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(tmp_path / "disk")], check=False)
