"""Metrics: per-batch rollout statistics, jsonl + tracker logging, the run summary."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from src.configuration.assignment import TrackersConfig
from src.experiment.trackers import Tracker, open_trackers
from src.records.episode import EpisodeRecord, EpisodeStatus, count_successes
from src.storage.files import JsonlLog


def episode_statistics(records: Sequence[EpisodeRecord], prefix: str = "") -> dict[str, float]:
    """Mean reward, success rate, status shares and lengths over some episodes."""
    if not records:
        return {}
    rewards = [record.reward for record in records]
    count = len(records)
    stats = {
        f"{prefix}reward": statistics.fmean(rewards),
        f"{prefix}success_rate": count_successes(records) / count,
        f"{prefix}turns/mean": statistics.fmean(r.turns for r in records),
        f"{prefix}completions/mean_length": statistics.fmean(r.completion_tokens for r in records),
        f"{prefix}episodes": float(count),
    }
    for status in EpisodeStatus:
        if status is not EpisodeStatus.RUNNING:
            stats[f"{prefix}status/{status.value}"] = (
                sum(r.status is status for r in records) / count)
    return stats


def summarize(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """Overall and per-category statistics of a run's episodes."""
    records = list(records)
    by_category: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        by_category[record.category].append(record)
    return {
        "overall": episode_statistics(records),
        "per_category": {category: episode_statistics(items)
                         for category, items in sorted(by_category.items())},
    }


class MetricsLog:
    """metrics.jsonl (one row per logged step), mirrored to the configured trackers
    (TensorBoard by default), which are opened at the first row."""

    def __init__(self, output_dir: Path, trackers: TrackersConfig | None = None) -> None:
        self.jsonl = JsonlLog(output_dir / "metrics.jsonl")
        self._output_dir = output_dir
        self._settings = trackers or TrackersConfig()
        self._trackers: list[Tracker] | None = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {key: float(value) for key, value in metrics.items()}
        self.jsonl.append([{"step": step, **clean}])
        if self._trackers is None:
            self._trackers = open_trackers(self._settings, self._output_dir)
        for tracker in self._trackers:
            tracker.log(step, clean)

    def close(self) -> None:
        for tracker in self._trackers or []:
            tracker.close()
        self._trackers = None
