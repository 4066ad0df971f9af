"""A trainer of episodes that trains nothing and records how the loop calls it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from src.callbacks.callback import BatchContext, EpisodeTrainer, TrainingSchedule


class RecordingTrainer(EpisodeTrainer):
    calls: ClassVar[list[tuple[str, object]]] = []  # the last run's, in order

    def __init__(self) -> None:
        RecordingTrainer.calls = []

    def prepare(self, schedule: TrainingSchedule) -> None:
        self.calls.append(("prepare", schedule))

    def train(self, batch: BatchContext) -> dict[str, float]:
        self.calls.append(("train", (batch.batch_index, len(batch.episodes))))
        return {"probe/episodes": float(len(batch.episodes))}

    def on_batch_end(self, batch: BatchContext) -> dict[str, float]:
        self.calls.append(("on_batch_end", batch.batch_index))
        return {}

    def consider_best(self, step: int, figures: Mapping[str, float]) -> None:
        self.calls.append(("consider_best", (step, dict(figures))))

    def save_state(self, directory: Path) -> None:
        self.calls.append(("save_state", directory.name))
