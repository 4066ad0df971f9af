"""The share of a batch's wall time that a tool recipe's episodes spend in their sandboxes,
against the plain-process backend as the baseline.

Runs the first --batches batches of a tool recipe (its own settings, no evaluation) once
with each backend (`bubblewrap`, the recipe's isolation; `unsafe_process`, the same
supervisor as a plain child process), each in a fresh output folder under --output_dir.
Every episode's time waiting on its sandbox (taking it from the pool, its tool calls, the
check of its final answer, closing it) is summed, timed around the tool episode's own
methods (src/tasks/tool_episode.py and the task's subclass). Prints, per backend: the
batches' rollout seconds (metrics.jsonl `time/rollout_seconds`), the episodes, their
sandbox seconds, and the share: sandbox seconds / (episodes x rollout seconds), the mean
share of an episode's life spent waiting on its sandbox (the episodes of a batch run side
by side for the whole rollout). The update is not part of the share.

python bench/sandbox_batch_share.py --config_path configs/assignments/math_python_tool.yaml \
    [--batches 2] --output_dir outputs/sandbox_batch_share
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from src.run_experiment import main as run_experiment  # noqa: E402
from src.tasks.tool_episode import ToolEpisode  # noqa: E402

TIMED = ("_reset", "_run", "_final_answer", "_going_on", "close")


class SandboxClock:
    """Wall seconds spent in the timed methods, outermost calls only (a reset closes the
    previous sandbox: counted once)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._depth = threading.local()

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*arguments: Any, **keywords: Any) -> Any:
            depth = getattr(self._depth, "value", 0)
            self._depth.value = depth + 1
            started = time.perf_counter()
            try:
                return method(*arguments, **keywords)
            finally:
                self._depth.value = depth
                if depth == 0:
                    with self._lock:
                        self.seconds += time.perf_counter() - started
        return timed


def tool_episode_classes() -> list[type]:
    found, pending = [], [ToolEpisode]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending += cls.__subclasses__()
    return found


def instrument(clock: SandboxClock) -> None:
    for cls in tool_episode_classes():
        for name in TIMED:
            if name in cls.__dict__:
                setattr(cls, name, clock.wrap(cls.__dict__[name]))


def measure(config_path: Path, backend: str, batches: int, output_dir: Path,
            clock: SandboxClock) -> dict[str, float]:
    recipe = yaml.safe_load(config_path.read_text())["assignment_config"]
    overrides = {"import": str(config_path.resolve()), "assignment_config": {
        "output_dir": str(output_dir), "rollout": {"max_batches": batches},
        "evaluation": {"at_start": False, "at_end": False, "every_n_batches": None},
        "task": {"parameters": {"sandbox": {"backend": backend}}}}}
    config = output_dir.with_suffix(".yaml")
    config.write_text(yaml.safe_dump(overrides))
    clock.seconds = 0.0
    status = run_experiment(["--config_path", str(config), "--no_progress"])
    if status != 0:
        raise SystemExit(f"{backend}: the run ended with status {status}")
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").open()]
    rollout_s = sum(row["time/rollout_seconds"] for row in rows
                    if "time/rollout_seconds" in row)
    episodes = batches * recipe["rollout"]["batch_size"] * recipe["rollout"]["group_size"]
    return {"rollout_seconds": rollout_s, "episodes": episodes,
            "sandbox_seconds": clock.seconds,
            "share": clock.seconds / (episodes * rollout_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config_path", type=Path, required=True)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--output_dir", type=Path, required=True)
    arguments = parser.parse_args()
    recipe = yaml.safe_load(arguments.config_path.read_text())["assignment_config"]
    importlib.import_module(recipe["task"]["module"].rsplit(".", 1)[0])
    clock = SandboxClock()
    instrument(clock)
    arguments.output_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for backend in ("bubblewrap", "unsafe_process"):
        results[backend] = measure(arguments.config_path, backend, arguments.batches,
                                   arguments.output_dir.resolve() / backend, clock)
        figures = results[backend]
        print(f"{backend}: {arguments.batches} batches, rollout {figures['rollout_seconds']:.1f} s, "
              f"{figures['episodes']} episodes, {figures['sandbox_seconds']:.1f} sandbox s, "
              f"share {100 * figures['share']:.1f}%")
    (arguments.output_dir / "sandbox_batch_share.json").write_text(
        json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
