"""Kill-anywhere: SIGKILL a run at random moments, resume it with the same command each time,
and compare what it ends with against an uninterrupted run of the same assignment.

1. The reference: the assignment run once without interruption (its wall time T).
2. The killed run: started, SIGKILLed, started again with the same command, N times, then
   run to its end. The kills are spread over the whole run: kill k picks a batch b_k
   uniformly among the run's B batches (sorted, so the run moves on) and a fraction f_k
   uniformly in [0, 1); once the process has entered the loop (its first "rolling out"
   log line) and committed b_k batches, it is killed f_k batch-durations later (the
   duration measured in this run's own log, the reference's mean before that) - inside
   a rollout, an update, a checkpoint write, an evaluation or a pool sync. A resumed run
   redoes the batch in flight, so a kill loses at most that batch. A kill whose process
   ended first is reported as not landed.
3. The comparison: every adapter tensor of the final checkpoint bit for bit, runs.jsonl
   (each (batch, sample, group) once, and the same rows), metrics.jsonl (the same rows,
   wall-clock keys aside) and the evaluation files.

python bench/kill_anywhere.py --config_path configs/assignments/math_grpo_quickstart.yaml \
    --kills 20 --output_dir outputs/kill_anywhere [--seed 0]
Prints one line per kill and the comparison; writes OUTPUT_DIR/kill_anywhere.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import torch
from safetensors.torch import load_file

PROJECT_ROOT = Path(__file__).resolve().parents[1]
WALL_CLOCK_KEYS = ("_seconds", "time/")  # metrics that measure time, not training
ROLLING_OUT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*batch (\d+) of \d+: "
                         r"rolling out", re.MULTILINE)


def command(config_path: Path, output_dir: Path) -> list[str]:
    return [sys.executable, str(PROJECT_ROOT / "src" / "run_experiment.py"), "--config_path",
            str(config_path), "--output_dir", str(output_dir), "--no_progress"]


def completed_batches(output_dir: Path) -> int:
    try:
        return json.loads((output_dir / "run_state.json").read_text())["completed_batches"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return -1


def started(log: Path, offset: int) -> bool:
    """Whether the process has loaded its model and entered the loop."""
    return "rolling out" in log.read_text(errors="replace")[offset:]


def batch_seconds(log: Path, default: float) -> float:
    """The median duration of the last five batches the log shows run through in one
    process (batch n's "rolling out" line to batch n+1's), or `default`."""
    if not log.exists():
        return default
    starts = [(int(match.group(2)), datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f"))
              for match in ROLLING_OUT.finditer(log.read_text(errors="replace"))]
    durations = [(later - earlier).total_seconds()
                 for (batch, earlier), (next_batch, later) in itertools.pairwise(starts)
                 if next_batch == batch + 1]
    return statistics.median(durations[-5:]) if durations else default


def last_line(log: Path, offset: int) -> str:
    lines = [line for line in log.read_text(errors="replace")[offset:].splitlines()
             if line.strip()]
    return lines[-1][-120:] if lines else ""


def run(config_path: Path, output_dir: Path, log: Path, kill_fraction: float | None = None,
        after_batches: int = 0, default_batch_seconds: float = 0.0) -> dict:
    """Start the command; once it has entered the loop and committed `after_batches`
    batches, wait `kill_fraction` of a batch's duration and SIGKILL it, or (None) let it
    finish. Returns what happened, with the seconds it spent in the loop and the log's
    last line at the kill."""
    offset = log.stat().st_size if log.exists() else 0
    with log.open("a") as stream:
        process = subprocess.Popen(command(config_path, output_dir), cwd=PROJECT_ROOT,
                                   stdout=stream, stderr=stream)
        launched = time.monotonic()
        while process.poll() is None and not started(log, offset):
            time.sleep(0.05)
        in_loop = time.monotonic()
        while process.poll() is None and completed_batches(output_dir) < after_batches:
            time.sleep(0.05)
        delay = (None if kill_fraction is None
                 else kill_fraction * batch_seconds(log, default_batch_seconds))
        try:
            process.wait(timeout=delay)
            ended = True
        except subprocess.TimeoutExpired:
            at = last_line(log, offset)
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            ended = False
    if ended and process.returncode != 0:
        raise SystemExit(f"{output_dir}: exit status {process.returncode}, see {log}")
    return {"killed_after_s": None if ended else round(delay or 0.0, 2),
            "loop_seconds": round(time.monotonic() - in_loop, 2),
            "seconds": round(time.monotonic() - launched, 2), "after_batches": after_batches,
            "completed_batches": completed_batches(output_dir), "ended": ended,
            "last_log_line": None if ended else at}


def final_adapter(output_dir: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    callbacks = output_dir / "callback_state"  # none for a run without training
    for callback in sorted(callbacks.iterdir() if callbacks.is_dir() else []):
        latest = max(callback.glob("checkpoint-*"))
        for path in sorted(latest.rglob("*.safetensors")):
            for name, tensor in load_file(path).items():
                tensors[f"{callback.name}/{path.relative_to(latest)}/{name}"] = tensor
    return tensors


def jsonl(path: Path) -> list[dict]:
    # split at newlines only: a reply may hold U+2028, which str.splitlines also splits at
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")
            if line.strip()]


def without_wall_clock(row: dict) -> dict:
    return {key: value for key, value in row.items()
            if not any(mark in key for mark in WALL_CLOCK_KEYS)}


def compare(reference: Path, killed: Path) -> dict:
    expected, resumed = final_adapter(reference), final_adapter(killed)
    differing = [name for name in expected
                 if name not in resumed or not torch.equal(expected[name], resumed[name])]
    runs = jsonl(killed / "runs.jsonl")
    keys = Counter((row["batch_index"], row["sample_id"], row["group_index"]) for row in runs)
    evaluations = sorted(path.name for path in (reference / "evaluation").glob("*.jsonl"))
    return {
        "adapter_tensors": len(expected),
        "adapter_tensors_differing": len(differing) + len(set(resumed) - set(expected)),
        "adapter_max_abs_difference": max(
            ((expected[name] - resumed[name]).abs().max().item() for name in expected
             if name in resumed), default=0.0),
        "episodes": len(runs),
        "episodes_logged_twice": sum(count > 1 for count in keys.values()),
        "runs_jsonl_equal": runs == jsonl(reference / "runs.jsonl"),
        "metrics_rows_equal": ([without_wall_clock(r) for r in jsonl(killed / "metrics.jsonl")]
                               == [without_wall_clock(r)
                                   for r in jsonl(reference / "metrics.jsonl")]),
        "evaluation_files_equal": all(
            (killed / "evaluation" / name).read_bytes()
            == (reference / "evaluation" / name).read_bytes() for name in evaluations),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config_path", type=Path, required=True)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    base = arguments.output_dir.resolve()
    base.mkdir(parents=True, exist_ok=True)
    reference, killed = base / "reference", base / "killed"
    reference_record = base / "reference.json"
    if reference_record.is_file():  # an earlier invocation ran it to its end
        reference_run = json.loads(reference_record.read_text())
        print(f"reusing the reference run in {reference}", flush=True)
    else:
        reference_run = run(arguments.config_path, reference, base / "reference.log")
        reference_record.write_text(json.dumps(reference_run, indent=2) + "\n")
    loop_seconds = reference_run["loop_seconds"]
    batches = completed_batches(reference)
    print(f"reference run: {reference_run['seconds']:.0f} s, {loop_seconds:.0f} s in the loop, "
          f"{batches} batches", flush=True)

    generator = random.Random(arguments.seed)
    targets = sorted(generator.randrange(batches) for _ in range(arguments.kills))
    fractions = [generator.random() for _ in targets]
    kills = []
    killed_start = time.monotonic()
    for index, (target, fraction) in enumerate(zip(targets, fractions, strict=True)):
        kills.append(run(arguments.config_path, killed, base / "killed.log", fraction, target,
                         loop_seconds / batches))
        print(f"kill {index + 1}/{arguments.kills}: {kills[-1]}", flush=True)
    run(arguments.config_path, killed, base / "killed.log")
    killed_seconds = time.monotonic() - killed_start
    result = {"config_path": str(arguments.config_path), "seed": arguments.seed,
              "reference_seconds": reference_run["seconds"],
              "killed_run_seconds": round(killed_seconds, 1),
              "kills_landed": sum(not kill["ended"] for kill in kills), "kills": kills,
              **compare(reference, killed)}
    (base / "kill_anywhere.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({key: value for key, value in result.items() if key != "kills"},
                     indent=2))


if __name__ == "__main__":
    main()
