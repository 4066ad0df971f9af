"""Helpers for tests that run a pipeline through its command and read its run folder."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from src.run_experiment import main


def run_command(config: Path, *extra: str) -> int:
    """`python src/run_experiment.py --config_path CONFIG --no_progress EXTRA...`, in process."""
    return main(["--config_path", str(config), "--no_progress", *extra])


def checkpoint_adapter(output: Path, step: int) -> dict[str, torch.Tensor]:
    """The adapter tensors of output/training_state/checkpoint-<step>."""
    folder = output / "training_state" / f"checkpoint-{step:06d}" / "lora_weights"
    return load_file(folder / "adapter_model.safetensors")
