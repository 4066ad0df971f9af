"""Helpers for tests that run a pipeline through its command and read its run folder."""

from __future__ import annotations

import subprocess
import sys
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
