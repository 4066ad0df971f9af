"""Storage faults: a run whose output folder fills up, and later turns read-only, mid-run.

The run's folder is a real small file system (a tmpfs this script mounts: run it as root).
1. The assignment starts there; a few seconds after batch `--full_after` commits, a file
   fills the disk. The run must stop with exit status 3 and a "storage error" line, its
   run_state.json still readable; the file is removed and the same command resumes it.
2. A few seconds after batch `--read_only_after` commits, the file system is remounted
   read-only: the same again, then it is remounted read-write and the run resumes to its end.
3. The final adapter, runs.jsonl, metrics.jsonl and evaluation files are compared with an
   uninterrupted run of the same assignment (`--reference_dir`, e.g. kill_anywhere's).

python bench/storage_faults.py --config_path configs/assignments/math_grpo_quickstart.yaml \
    --reference_dir outputs/kill_anywhere/reference --output_dir outputs/storage_faults
Writes OUTPUT_DIR/storage_faults.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

from bench.kill_anywhere import command, compare, completed_batches  # noqa: E402


def fill(folder: Path) -> Path:
    """Write a file into `folder` until its file system has no space left."""
    filler = folder / "filler"
    handle = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(handle, bytes(1 << 16))
    except OSError:
        pass
    finally:
        os.close(handle)
    return filler


def remount(folder: Path, mode: str) -> None:
    """`mount -o remount,MODE`; a remount to read-only is refused while a file there is open
    for writing (a checkpoint being saved), so it is tried again until it takes."""
    deadline = time.monotonic() + 120
    while subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)],
                         capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"could not remount {folder} {mode} in 120 s")
        time.sleep(0.01)


def run_until_fault(config_path: Path, output_dir: Path, log: Path, after_batch: int,
                    delay_s: float, fault: Callable[[], None]) -> dict:
    """Start the command, wait for batch `after_batch` to commit and `delay_s` more, apply
    `fault`, and wait for the process to stop on it."""
    with log.open("a") as stream:
        offset = log.stat().st_size
        process = subprocess.Popen(command(config_path, output_dir), cwd=PROJECT_ROOT,
                                   stdout=stream, stderr=stream)
        while process.poll() is None and completed_batches(output_dir) < after_batch:
            time.sleep(0.05)
        time.sleep(delay_s)
        faulted_at = time.monotonic()
        committed_at_fault = completed_batches(output_dir)
        fault()
        process.wait()
    output = log.read_text(errors="replace")[offset:]
    errors = [line for line in output.splitlines() if line.startswith("storage error:")]
    return {"after_batch": after_batch, "delay_s": round(delay_s, 2),
            "committed_at_fault": committed_at_fault,
            "exit_status": process.returncode,
            "seconds_to_stop": round(time.monotonic() - faulted_at, 2),
            "message": errors[-1] if errors else None,
            "traceback": "Traceback" in output,
            "committed_after_stop": completed_batches(output_dir)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config_path", type=Path, required=True)
    parser.add_argument("--reference_dir", type=Path, required=True)
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--size_mb", type=int, default=512)
    parser.add_argument("--full_after", type=int, default=4)
    parser.add_argument("--read_only_after", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    base = arguments.output_dir.resolve()
    disk = base / "disk"
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={arguments.size_mb}m", "tmpfs",
                    str(disk)], check=True)
    generator = random.Random(arguments.seed)
    run_dir, log = disk / "run", base / "run.log"
    started = time.monotonic()
    try:
        filler: list[Path] = []
        full = run_until_fault(arguments.config_path, run_dir, log, arguments.full_after,
                               generator.uniform(0.0, 20.0),
                               lambda: filler.append(fill(disk)))
        print(f"full disk: {full}", flush=True)
        filler[0].unlink()
        read_only = run_until_fault(arguments.config_path, run_dir, log,
                                    arguments.read_only_after, generator.uniform(0.0, 20.0),
                                    lambda: remount(disk, "ro"))
        print(f"read-only folder: {read_only}", flush=True)
        remount(disk, "rw")
        with log.open("a") as stream:
            final = subprocess.run(command(arguments.config_path, run_dir), cwd=PROJECT_ROOT,
                                   stdout=stream, stderr=stream)
        result = {"config_path": str(arguments.config_path), "seed": arguments.seed,
                  "full_disk": full, "read_only": read_only,
                  "final_exit_status": final.returncode,
                  "seconds": round(time.monotonic() - started, 1),
                  **compare(arguments.reference_dir.resolve(), run_dir)}
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    (base / "storage_faults.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
