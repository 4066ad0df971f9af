"""Held-out evaluation: the one evaluator every pipeline (and `src/evaluate.py`) uses.

An evaluation at step N rolls out the first `max_samples` samples of each held-out split
once, `chunk` episodes at a time, at `temperature`, writes every episode to
`evaluation_file(output_dir, N, split)` (and, given a metrics log, a sample of them to its
trackers) and returns their statistics under the split's prefix. Its seeds come from the
run's `random_seed` and N alone, so the same weights evaluated again at the same step give
the same replies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from src.agents.agent import Agent
from src.configuration.models import FaultPolicy
from src.records.episode import EpisodeRecord
from src.run.metrics import MetricsLog, episode_statistics
from src.run.rollout import episode_seed, roll_out_seeded
from src.storage.files import atomic_write_text
from src.storage.run_layout import EVALUATION_PREFIXES, evaluation_file
from src.tasks.task import Task


# Metric prefixes of the held-out splits; "eval/" is the validation split's.
def task_metrics(records: Sequence[EpisodeRecord], prefix: str) -> dict[str, float]:
    """Each metric's mean, under `prefix` + its name, over the episodes that report it (a
    task or agent reports some only where they apply)."""
    values: dict[str, list[float]] = {}
    for record in records:
        for name, value in record.metrics.items():
            values.setdefault(prefix + name, []).append(value)
    return {key: sum(entries) / len(entries) for key, entries in values.items()}


@dataclass
class Evaluator:
    """The agent on the task's held-out `splits`, as a run's settings say."""

    task: Task[Any]
    agent: Agent
    splits: Sequence[str]
    max_samples: int | None
    temperature: float
    chunk: int  # episodes rolled out together
    random_seed: int
    faults: FaultPolicy = field(default_factory=FaultPolicy)

    def evaluate(self, step: int, output_dir: Path, metrics: MetricsLog | None = None
                 ) -> dict[str, float]:
        """Every split in turn, their figures together ({} for a split with no samples).
        Every split draws the same episode seeds: the splits differ only in their samples.
        `metrics`: where each split's table of sampled episodes goes (the caller logs the
        figures returned)."""
        stats: dict[str, float] = {}
        for split in self.splits:
            records = self.roll_out(split, step)
            if not records:
                continue
            # Every episode, for statistics beyond the logged means (spreads, tables).
            atomic_write_text(evaluation_file(output_dir, step, split), "".join(
                json.dumps(record.model_dump(mode="json")) + "\n" for record in records))
            if metrics is not None:
                metrics.log_episodes(step, split, records)
            prefix = EVALUATION_PREFIXES[split]
            stats.update(episode_statistics(records, prefix=prefix))
            stats.update(task_metrics(records, prefix))
        return stats

    def roll_out(self, split: str, step: int) -> list[EpisodeRecord]:
        ids = list(self.task.sample_ids(split))[:self.max_samples]
        records: list[EpisodeRecord] = []
        with self.agent.evaluating(self.temperature):
            for start in range(0, len(ids), self.chunk):
                torch.manual_seed(episode_seed(self.random_seed, -1 - step, start))
                pairs = [(self.task.get_sample(i), 0) for i in ids[start:start + self.chunk]]
                episodes = roll_out_seeded(pairs, self.task, self.agent, step,
                                           self.random_seed, self.faults)
                records += [episode.to_record() for episode in episodes]
        return records
