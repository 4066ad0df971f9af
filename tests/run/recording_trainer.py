"""A trainer of episodes that trains nothing and records how the loop calls it."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from src.run.protocol import BestRule
from src.run.trainer import BatchContext, Trainer, TrainingSchedule


class RecordingTrainer(Trainer):
    calls: ClassVar[list[tuple[str, object]]] = []  # the last run's, in order

    def __init__(self) -> None:
        RecordingTrainer.calls = []

    def prepare(self, schedule: TrainingSchedule) -> None:
        self.calls.append(("prepare", schedule))

    def train(self, batch: BatchContext) -> dict[str, float]:
        self.calls.append(("train", (batch.batch_index, len(batch.episodes))))
        return {"probe/episodes": float(len(batch.episodes))}

    @property
    def best_rule(self) -> BestRule:
        return BestRule("eval/success_rate")

    def save_state(self, directory: Path) -> None:
        self.calls.append(("save_state", directory.name))
        (directory / "lora_weights").mkdir()  # what best/ copies of a trainer's checkpoint
