"""A trainer's checkpoint: what every trainer (online RL, supervised, offline) writes into
its checkpoint folder and reads back on resume.

    lora_weights/        the adapter, PEFT format
    optimizer_state.pt   optimiser and learning-rate schedule
    rng_state.pt         every random generator a training step draws from
    training_step.json   the trainer's other state (step, policy version, KL coefficient, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from src.language_models.language_model import TrainableLanguageModel
from src.storage.files import DamagedRunFolder, atomic_write_json, read_json
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
    this process; the optimiser and schedule state are returned for their owner.
    DamagedRunFolder naming the file where one is not what a trainer saves (an adapter
    with values that are not finite numbers included: a checkpoint written before
    checksums were kept has only its headers checked before it loads)."""
    extra = read_json(directory / TRAINING_STEP)
    if not isinstance(extra, dict) or not isinstance(extra.get("policy_version"), int):
        raise DamagedRunFolder(f"{directory / TRAINING_STEP}: not a trainer's step record "
                               "(a mapping with an integer policy_version)")
    model.load_adapter(directory / ADAPTER, extra["policy_version"])
    damaged = non_finite_weights(model)
    if damaged:
        raise DamagedRunFolder(f"{directory / ADAPTER}: {damaged} of the adapter's tensors "
                               "hold values that are not finite numbers")
    saved = load_plain(directory / OPTIMIZER)
    if not isinstance(saved, dict) or not all(
            isinstance(saved.get(key), dict | None) for key in ("optimizer", "scheduler")):
        raise DamagedRunFolder(f"{directory / OPTIMIZER}: not an optimiser's state (a "
                               "mapping of 'optimizer' and 'scheduler' state dicts)")
    load_rng_state(directory / RNG)
    return SavedTrainingState(extra, saved["optimizer"], saved["scheduler"])


def non_finite_weights(model: TrainableLanguageModel) -> int:
    """How many of the model's trainable tensors hold a NaN or an infinity."""
    parameters = model.trainable_parameters()
    if not parameters:
        return 0
    device = parameters[0].device  # one transfer of the flags, not one per tensor
    flags = [(~torch.isfinite(parameter).all()).to(device) for parameter in parameters]
    return int(torch.stack(flags).sum())
