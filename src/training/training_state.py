"""A trainer's checkpoint: what every trainer (online RL, supervised, offline) writes into
its checkpoint folder and reads back on resume.

    lora_weights/        the adapter, PEFT format
    optimizer_state.pt   optimiser and learning-rate schedule
    rng_state.pt         every random generator a training step draws from
    training_step.json   the trainer's other state (step, policy version, KL coefficient, ...)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from src.language_models.language_model import TrainableLanguageModel
from src.storage.files import atomic_write_json
from src.training.rng_state import load_rng_state, save_rng_state
from src.training.safe_load import load_plain

ADAPTER = "lora_weights"
OPTIMIZER = "optimizer_state.pt"
RNG = "rng_state.pt"
TRAINING_STEP = "training_step.json"


def save_training_state(directory: Path, model: TrainableLanguageModel,
                        optimizer_state: dict[str, Any] | None,
                        scheduler_state: dict[str, Any] | None,
                        extra: dict[str, Any]) -> None:
    """Write the adapter, optimiser and schedule state (`state_dict()` form), RNG and `extra`
    into an empty `directory`."""
    model.save_adapter(directory / ADAPTER)
    torch.save({"optimizer": optimizer_state, "scheduler": scheduler_state},
               directory / OPTIMIZER)
    save_rng_state(directory / RNG)
    atomic_write_json(directory / TRAINING_STEP,
                      {"policy_version": model.policy_version, **extra})


@dataclass(frozen=True)
class SavedTrainingState:
    extra: dict[str, Any]  # with policy_version
    optimizer_state: dict[str, Any] | None
    scheduler_state: dict[str, Any] | None


def load_training_state(directory: Path, model: TrainableLanguageModel) -> SavedTrainingState:
    """Read back what save_training_state wrote: the adapter into `model`, the RNG into
    this process; the optimiser and schedule state are returned for their owner."""
    extra = json.loads((directory / TRAINING_STEP).read_text(encoding="utf-8"))
    model.load_adapter(directory / ADAPTER, extra["policy_version"])
    saved = load_plain(directory / OPTIMIZER)
    load_rng_state(directory / RNG)
    return SavedTrainingState(extra, saved["optimizer"], saved["scheduler"])
