"""bench/kill_anywhere.py on a sandboxed recipe, with the sandbox processes each run leaves.

Runs kill_anywhere's own `main` (same arguments) with its `run` counted: every process the
runs start carries an environment variable with a token of this invocation (bubblewrap
and its launcher inherit it; the supervisor inside has a cleared environment and is
counted as bwrap's descendant), sampled every `SAMPLE_S` while a run goes, and counted
again after it ended or was SIGKILLed (up to `SETTLE_S` for the kernel to take them).
Added to each run's record:

- sandboxes_last_seen: bwrap processes of this invocation at the last sample before the
  run ended or was killed (the sandboxes the kill met);
- left_after: processes of this invocation still alive after the run (must be empty);
- orphaned_supervisors: sandbox supervisors on the host whose parent is not a bwrap (a
  sandbox that outlived its bwrap; any job's, so any of them is a leak);
- bwrap_host_before, bwrap_host_after: `pgrep -f bwrap` counts over the whole host
  (other jobs' sandboxes included).

    OMP_NUM_THREADS=1 python -m experiments.tool_tasks.kill_anywhere_sandboxes \\
        --config_path experiments/tool_tasks/configs/code_tests_kill_anywhere.yaml \\
        --kills 4 --output_dir outputs/code_tests_kill_anywhere
"""

from __future__ import annotations

import functools
import importlib.util
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from src.sandboxes.backends import SUPERVISOR_INSIDE

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TAG = "KILL_ANYWHERE_SANDBOX_TOKEN"
SAMPLE_S = 0.2
SETTLE_S = 5.0


def load_kill_anywhere() -> Any:
    spec = importlib.util.spec_from_file_location(
        "kill_anywhere", PROJECT_ROOT / "bench" / "kill_anywhere.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tagged(token: str) -> list[psutil.Process]:
    """Processes of this invocation's runs (the token in their environment) and their
    descendants."""
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get(TAG) == token:
                found[process.pid] = process
                found |= {child.pid: child for child in process.children(recursive=True)}
        except psutil.Error:
            continue
    return list(found.values())


def described(processes: list[psutil.Process]) -> list[str]:
    names = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                names.append(f"{process.pid} {' '.join(process.cmdline())[:100]}")
        except psutil.Error:
            continue
    return names


def is_run(process: psutil.Process) -> bool:
    """The run's own process, alive."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE and \
            any(part.endswith("run_experiment.py") for part in process.cmdline())
    except psutil.Error:
        return False


def sandboxes(processes: list[psutil.Process]) -> int:
    count = 0
    for process in processes:
        try:
            count += process.name() == "bwrap" and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            continue
    return count


def orphaned_supervisors() -> list[str]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if (process.info["cmdline"] or [])[1:4] != ["-I", SUPERVISOR_INSIDE, "serve"]:
            continue  # (bwrap's own command line names the supervisor too)
        try:
            parent = process.parent()
            if parent is None or parent.name() != "bwrap":
                found.append(f"{process.pid} (parent {parent.pid if parent else None})")
        except psutil.Error:
            continue
    return found


def host_bwrap_count() -> int:
    answer = subprocess.run(["pgrep", "-f", "bwrap"], capture_output=True, text=True)
    return len(answer.stdout.split())


def counted(run: Callable[..., dict], token: str) -> Callable[..., dict]:
    @functools.wraps(run)
    def counted_run(*args: Any, **kwargs: Any) -> dict:
        before = host_bwrap_count()
        last_seen = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(SAMPLE_S):
                processes = tagged(token)
                if any(is_run(process) for process in processes):  # not yet killed
                    last_seen[0] = sandboxes(processes)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            record = run(*args, **kwargs)
        finally:
            done.set()
            sampler.join()
        deadline = time.monotonic() + SETTLE_S
        while (left := described(tagged(token))) and time.monotonic() < deadline:
            time.sleep(0.1)
        record |= {"sandboxes_last_seen": last_seen[0], "left_after": left,
                   "orphaned_supervisors": orphaned_supervisors(),
                   "bwrap_host_before": before, "bwrap_host_after": host_bwrap_count()}
        return record

    return counted_run


def main() -> None:
    token = secrets.token_hex(8)
    os.environ[TAG] = token  # inherited by the runs kill_anywhere starts
    kill_anywhere = load_kill_anywhere()
    kill_anywhere.run = counted(kill_anywhere.run, token)
    kill_anywhere.main()


if __name__ == "__main__":
    main()
