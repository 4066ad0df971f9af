"""The one checkpoint store of every pipeline.

A store is a folder of `checkpoint-NNNNNN/` (NNNNNN: batches or epochs committed), each:
  lora_weights/        the adapter, PEFT format
  optimizer_state.pt   optimiser and learning-rate schedule
  rng_state.pt         every random generator a training step draws from
  training_step.json   the trainer's other state (step, policy version, KL coefficient, ...)
  best.json            present when this checkpoint is a new best
and `best/` (lora_weights/ + best.json), promoted from a checkpoint only after the run has
committed it, so that a kill in between never leaves a best/ from a discarded batch.
"""

from __future__ import annotations

import json
import math
import shutil
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from src.language_models.language_model import TrainableLanguageModel
from src.storage.files import atomic_directory, atomic_write_json, remove_stale_temporaries
from src.training.rng_state import load_rng_state, save_rng_state
from src.training.safe_load import load_plain

ADAPTER = "lora_weights"
OPTIMIZER = "optimizer_state.pt"
RNG = "rng_state.pt"
TRAINING_STEP = "training_step.json"
BEST_MARK = "best.json"
BEST = "best"
PREFIX = "checkpoint-"


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


def improves(value: float | None, best: float | None,
             mode: Literal["max", "min"] = "max") -> bool:
    """The best-checkpoint rule of every pipeline: a step is a new best when its value is
    strictly better than the best so far, so that the earliest of equal values stays best;
    a step without the value, or with a value that is not a finite number (a NaN would
    stay best forever: nothing compares above it), never is."""
    if value is None or not math.isfinite(value):
        return False
    return best is None or (value > best if mode == "max" else value < best)


def mark_best(directory: Path, record: dict[str, Any]) -> None:
    """Declare the checkpoint being written in `directory` a new best (promoted later)."""
    atomic_write_json(directory / BEST_MARK, record)


class CheckpointStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, step: int) -> Path:
        return self.root / f"{PREFIX}{step:06d}"

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(folder.name.removeprefix(PREFIX))
                      for folder in self.root.glob(f"{PREFIX}*") if folder.is_dir())

    def write(self, step: int) -> AbstractContextManager[Path]:
        """`with store.write(step) as folder:` fill `folder`; it replaces the checkpoint in
        one rename when the block succeeds."""
        return atomic_directory(self.path(step))

    def prune(self, keep: int, committed: int) -> None:
        """Keep the newest `keep` committed checkpoints; drop any beyond the commit point
        (a batch that was in flight when the run was killed) and stale temporaries."""
        remove_stale_temporaries(self.root)
        steps = self.steps()
        for step in steps:
            if step > committed:
                shutil.rmtree(self.path(step))
        kept = [step for step in steps if step <= committed]
        for step in kept[:-keep] if keep > 0 else []:
            shutil.rmtree(self.path(step))

    def promote_best(self, step: int) -> bool:
        """Copy checkpoint `step`'s adapter to best/ if it was marked best and best/ does not
        hold it yet (so calling this again after a resume is harmless)."""
        mark = self.path(step) / BEST_MARK
        if not mark.is_file():
            return False
        record = json.loads(mark.read_text(encoding="utf-8"))
        current = self.root / BEST / BEST_MARK
        if current.is_file() and json.loads(current.read_text(encoding="utf-8")) == record:
            return False
        with atomic_directory(self.root / BEST) as best:
            shutil.copytree(self.path(step) / ADAPTER, best / ADAPTER)
            if (self.path(step) / TRAINING_STEP).is_file():  # the adapter's policy version
                shutil.copy2(self.path(step) / TRAINING_STEP, best / TRAINING_STEP)
            atomic_write_json(best / BEST_MARK, record)
        return True
