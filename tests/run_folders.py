"""Helpers for tests that run a pipeline through its command and read its run folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from src.run_experiment import main
from tests.conftest import PROJECT_ROOT


def run_command(config: Path, *extra: str) -> int:
    """`python src/run_experiment.py --config_path CONFIG --no_progress EXTRA...`, in process."""
    return main(["--config_path", str(config), "--no_progress", *extra])


def process_command(config: Path) -> list[str]:
    """The same command for a new process (one a test can kill)."""
    return [sys.executable, str(PROJECT_ROOT / "src" / "run_experiment.py"),
            "--config_path", str(config), "--no_progress"]


def run_in_new_process(config: Path) -> None:
    """Run the command in a new process to its end; a failure shows the end of its output."""
    result = subprocess.run(process_command(config), cwd=PROJECT_ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, (
        f"exit {result.returncode}\n--- stdout (end)\n{result.stdout[-2000:]}"
        f"\n--- stderr (end)\n{result.stderr[-4000:]}")


def checkpoint_adapter(output: Path, step: int) -> dict[str, torch.Tensor]:
    """The adapter tensors of output/training_state/checkpoint-<step>."""
    folder = output / "training_state" / f"checkpoint-{step:06d}" / "lora_weights"
    return load_file(folder / "adapter_model.safetensors")


def committed_batches(output: Path) -> int:
    """How many batches (steps, epochs) the run folder has committed; -1 before its first
    commit point is written."""
    state = output / "run_state.json"
    return json.loads(state.read_text())["completed_batches"] if state.is_file() else -1


def kill_after_commits(config: Path, output: Path, commits: int, timeout_s: float = 300) -> None:
    """Start the command in a new process and SIGKILL it as soon as it has committed
    `commits` batches (in the rollout, update or checkpoint write of the next)."""
    process = subprocess.Popen(process_command(config), cwd=PROJECT_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while (process.poll() is None and committed_batches(output) < commits
           and time.monotonic() < deadline):
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    state = json.loads((output / "run_state.json").read_text())
    assert not state["finished"], "the run ended before it could be killed; slow it down"
    assert state["completed_batches"] >= commits, "the run died before the kill"


def final_checkpoint(output: Path, callback_id: str) -> Path:
    """The last committed checkpoint folder of a finished run's callback."""
    state = json.loads((output / "run_state.json").read_text())
    assert state["finished"]
    return (output / "callback_state" / callback_id
            / f"checkpoint-{state['completed_batches']:06d}")


def run_recipe_cut(tmp_path: Path, recipe: str, settings: str) -> Path:
    """Run configs/assignments/RECIPE, imported, with `settings` (YAML under
    assignment_config, indented two spaces: the cut-down rollout and evaluation) in
    tmp_path/run; assert it finished, and return the run folder."""
    output = tmp_path / "run"
    config = tmp_path / "config.yaml"
    config.write_text(f"import: {PROJECT_ROOT / 'configs' / 'assignments' / recipe}\n"
                      f"assignment_config:\n  output_dir: {output}\n{settings}")
    assert run_command(config) == 0
    assert json.loads((output / "run_state.json").read_text())["finished"]
    return output


def jsonl_rows(path: Path) -> list[dict]:
    """The rows of a jsonl file (runs.jsonl, metrics.jsonl, an evaluation file)."""
    return [json.loads(line) for line in path.open()]


def scalar_steps(output: Path, tag: str) -> list[int]:
    """The steps of every value of `tag` in the run's TensorBoard files, repeats kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(output / "tensorboard"), size_guidance={"scalars": 0},
                              purge_orphaned_data=False)
    events.Reload()
    return sorted(event.step for event in events.Scalars(tag))
