"""Metrics: per-batch rollout statistics, jsonl + tracker logging (with tables of sampled
episodes), the run summary."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from src.configuration.models import TrackersConfig
from src.maths.spread import spread
from src.records.episode import EpisodeRecord, EpisodeStatus, count_successes, counted_records
from src.run.trackers import (
    Tracker,
    last_episodes_logged,
    mark_episodes_logged,
    mark_metrics_sent,
    metrics_sent,
    open_trackers,
)
from src.storage.files import JsonlLog
from src.storage.run_layout import METRICS_LOG

CHAT_CHARACTERS = 16_000  # a table's chat text is cut to this: trackers hold tables whole


def episode_statistics(records: Sequence[EpisodeRecord], prefix: str = "") -> dict[str, float]:
    """Mean reward, success rate and lengths over the episodes that gave the agent a turn
    (`episodes` counts them), and each status's share of all."""
    if not records:
        return {}
    counted = counted_records(records)
    stats: dict[str, float] = {}
    if counted:
        count = len(counted)
        stats = {
            f"{prefix}reward": statistics.fmean(r.reward for r in counted),
            f"{prefix}success_rate": count_successes(counted) / count,
            f"{prefix}turns/mean": statistics.fmean(r.turns for r in counted),
            f"{prefix}completions/mean_length": statistics.fmean(
                r.completion_tokens for r in counted),
            f"{prefix}episodes": float(count),
        }
    for status in EpisodeStatus:
        if status is not EpisodeStatus.RUNNING:
            stats[f"{prefix}status/{status.value}"] = (
                sum(r.status is status for r in records) / len(records))
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


def chat_text(record: EpisodeRecord) -> str:
    text = "\n".join(f"[{message.role.value}]\n{message.content}" for message in record.chat)
    if len(text) <= CHAT_CHARACTERS:
        return text
    return f"{text[:CHAT_CHARACTERS]}\n[... {len(text) - CHAT_CHARACTERS} characters cut]"


def episode_row(step: int, record: EpisodeRecord) -> list[Any]:
    """A row of the trackers' EPISODE_COLUMNS."""
    return [step, record.sample_id, record.group_index, record.category, record.status.value,
            record.outcome.value, record.reward, record.turns, chat_text(record)]


class MetricsLog:
    """metrics.jsonl (one row per logged step), mirrored to the configured trackers
    (TensorBoard by default) up to the run's commit point (`restore`, `publish`)."""

    def __init__(self, output_dir: Path, trackers: TrackersConfig | None = None) -> None:
        self.jsonl = JsonlLog(output_dir / METRICS_LOG)
        self._output_dir = output_dir
        self._settings = trackers or TrackersConfig()
        self._trackers: list[Tracker] | None = None
        self._sent = 0  # bytes of metrics.jsonl the trackers have had

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """A row of metrics.jsonl; the trackers get it once it is committed (`publish`)."""
        clean = {key: float(value) for key, value in metrics.items()}
        self.jsonl.append([{"step": step, **clean}])

    def restore(self, committed: int) -> None:
        """Cut metrics.jsonl back to the commit point (`committed` bytes), then send the
        trackers the committed rows they have not had (a kill between a commit and its
        `publish` leaves some)."""
        self.jsonl.truncate(committed)
        if not self._opened():
            return
        sent = metrics_sent(self._output_dir)
        # Without the record (a run folder written before it was kept) every row went to
        # the trackers as it was logged; after going back to an earlier checkpoint, the
        # rows redone are sent again.
        self._sent = committed if sent is None else min(sent, committed)
        self.publish(committed)

    def publish(self, committed: int) -> None:
        """Send the trackers the rows of metrics.jsonl after what they have had, up to the
        commit point (`committed` bytes), and record how far they got."""
        trackers = self._opened()
        if not trackers or committed <= self._sent:
            return
        with self.jsonl.path.open("rb") as stream:
            stream.seek(self._sent)
            rows = stream.read(committed - self._sent).splitlines()
        for line in rows:
            metrics = json.loads(line)
            step = metrics.pop("step")
            for tracker in trackers:
                tracker.log(step, metrics)
        self._sent = committed
        mark_metrics_sent(self._output_dir, committed)

    def log_episodes(self, step: int, name: str, records: Sequence[EpisodeRecord]) -> None:
        """A spread of `records` as the trackers' table `episodes/<name>` at `step`, unless
        that table was logged at this step or a later one (a batch redone on resume)."""
        trackers = self._opened()
        last = last_episodes_logged(self._output_dir, name)
        if not trackers or not records or self._settings.episodes_per_table == 0 or (
                last is not None and last >= step):
            return
        rows = [episode_row(step, record)
                for record in spread(records, self._settings.episodes_per_table)]
        for tracker in trackers:
            tracker.log_episodes(step, name, rows)
        mark_episodes_logged(self._output_dir, name, step)

    def log_batch_episodes(self, step: int, records: Sequence[EpisodeRecord]) -> None:
        """A training batch's table `episodes/train`, every `train_episodes_every_n_batches`."""
        every = self._settings.train_episodes_every_n_batches
        if every and step % every == 0:
            self.log_episodes(step, "train", records)

    def _opened(self) -> list[Tracker]:
        if self._trackers is None:
            self._trackers = open_trackers(self._settings, self._output_dir)
        return self._trackers

    def close(self) -> None:
        for tracker in self._trackers or []:
            tracker.close()
        self._trackers = None
