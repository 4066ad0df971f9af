"""The experiment loop: batches of samples, G rollouts each, all episodes in lockstep."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from src.agents.agent import Agent
from src.callbacks.callback import BatchContext, Callback
from src.configuration.assignment import AssignmentConfig
from src.experiment.assembly import Components
from src.experiment.files import JsonlLog, atomic_directory, atomic_write_text
from src.experiment.metrics import MetricsLog, episode_statistics, summarize
from src.experiment.rollout import roll_out_lockstep
from src.experiment.run_directory import RunDirectory, RunState
from src.records.episode import Episode, EpisodeRecord, Sample
from src.tasks.task import Task

CHECKPOINTS_KEPT = 3


@dataclass(frozen=True)
class Schedule:
    """Which sample ids each batch holds, derived from the config alone (so resumable)."""

    batches: list[list[str]]

    @classmethod
    def build(cls, sample_ids: Sequence[str], assignment: AssignmentConfig) -> Schedule:
        rollout = assignment.rollout
        order = assignment.sample_order
        batches: list[list[str]] = []
        for epoch in range(rollout.num_epochs):
            if isinstance(order, list):
                missing = [sample_id for sample_id in order if sample_id not in set(sample_ids)]
                if missing:
                    raise ValueError(f"sample_order names unknown sample ids: {missing[:5]}")
                ids = list(order)
            else:
                ids = list(sample_ids)
                if order == "random":
                    random.Random(f"{assignment.random_seed}-{epoch}").shuffle(ids)
            size = rollout.batch_size
            batches += [ids[start:start + size] for start in range(0, len(ids), size)]
        if rollout.max_batches is not None:
            batches = batches[: rollout.max_batches]
        return cls(batches)


def _episode_seed(random_seed: int, batch_index: int, slot: int) -> int:
    return (random_seed * 1_000_003 + batch_index * 10_007 + slot) % (2**31)


def _roll_out(samples: Sequence[tuple[Sample, int]], task_pool: Callable[[int], Sequence[Task]],
              agent: Agent, batch_index: int, random_seed: int,
              callbacks: Sequence[Callback] = ()) -> list[Episode]:
    """Roll out (sample, group_index) pairs together, each episode seeded by its slot."""
    seeds = [_episode_seed(random_seed, batch_index, slot) for slot in range(len(samples))]
    return roll_out_lockstep(samples, task_pool(len(samples)), agent, batch_index, seeds,
                             callbacks)


def task_metrics(records: Sequence[EpisodeRecord], prefix: str) -> dict[str, float]:
    """Means of the numeric `metric/...` entries tasks put in episode info."""
    sums: dict[str, list[float]] = {}
    for record in records:
        for key, value in record.info.items():
            if key.startswith("metric/") and isinstance(value, int | float):
                sums.setdefault(prefix + key.removeprefix("metric/"), []).append(float(value))
    return {key: sum(values) / len(values) for key, values in sums.items()}


def evaluate_on_validation(task_pool: Callable[[int], Sequence[Task]], agent: Agent,
                           max_samples: int | None, temperature: float, chunk: int,
                           random_seed: int, step: int, output_dir: Path) -> dict[str, float]:
    """Roll out the first `max_samples` validation samples once each, `chunk` episodes at a
    time, at `temperature`; write them to output_dir/evaluation/step-N.jsonl and return the
    `eval/` statistics ({} when the task has no validation samples).

    `task_pool(n)` hands out n task instances (reused between calls).
    """
    task = task_pool(1)[0]
    ids = list(task.sample_ids("validation"))[:max_samples]
    if not ids:
        return {}
    records: list[EpisodeRecord] = []
    with agent.evaluating(temperature):
        for start in range(0, len(ids), chunk):
            torch.manual_seed(_episode_seed(random_seed, -1 - step, start))
            pairs = [(task.get_sample(i), 0) for i in ids[start:start + chunk]]
            episodes = _roll_out(pairs, task_pool, agent, step, random_seed)
            records += [episode.to_record() for episode in episodes]
    # Every evaluation episode, for statistics beyond the logged means (spreads, tables).
    atomic_write_text(output_dir / "evaluation" / f"step-{step:06d}.jsonl", "".join(
        json.dumps(record.model_dump(mode="json")) + "\n" for record in records))
    stats = episode_statistics(records, prefix="eval/")
    stats.update(task_metrics(records, "eval/"))
    return stats


class ExperimentLoop:
    def __init__(self, assignment: AssignmentConfig, components: Components,
                 run: RunDirectory, show_progress: bool = True) -> None:
        self.assignment = assignment
        self.components = components
        self.run = run
        self.show_progress = show_progress
        self.runs_log = JsonlLog(run.path / "runs.jsonl")
        self.metrics = MetricsLog(run.path)
        self._tasks: list[Task] = []

    # ---- episodes ------------------------------------------------------------------
    def _task_pool(self, size: int) -> list[Task]:
        while len(self._tasks) < size:
            self._tasks.append(self.components.make_task())
        return self._tasks[:size]

    def run_episodes(self, samples: Sequence[tuple[Sample, int]], batch_index: int,
                     notify_callbacks: bool = True) -> list[Episode]:
        """Roll out (sample, group_index) pairs together until every episode ends."""
        callbacks = list(self.components.callbacks.values()) if notify_callbacks else []
        return _roll_out(samples, self._task_pool, self.components.agent, batch_index,
                         self.assignment.random_seed, callbacks)

    # ---- evaluation ----------------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float]:
        rollout = self.assignment.rollout
        stats = evaluate_on_validation(
            self._task_pool, self.components.agent, self.assignment.evaluation.max_samples,
            self.assignment.evaluation.temperature, rollout.batch_size * rollout.group_size,
            self.assignment.random_seed, step, self.run.path)
        if stats:
            self.metrics.log(step, stats)
        return stats

    # ---- the run -------------------------------------------------------------------
    def execute(self, state: RunState) -> dict:
        assignment = self.assignment
        callbacks = self.components.callbacks
        # Cut the logs back to the last committed batch: the batch in flight is redone.
        self.runs_log.truncate(state.runs_bytes)
        self.metrics.jsonl.truncate(state.metrics_bytes)
        task = self._task_pool(1)[0]
        schedule = Schedule.build(task.sample_ids("train"), assignment)
        total = len(schedule.batches)
        for callback_id, callback in callbacks.items():
            callback.on_run_start(total, assignment.rollout.batch_size
                                 * assignment.rollout.group_size)
            self.run.prune_checkpoints(callback_id, CHECKPOINTS_KEPT, state.completed_batches)
            if state.completed_batches > 0:
                callback.restore_state(self.run.checkpoint_dir(callback_id,
                                                               state.completed_batches))
        evaluation = assignment.evaluation
        if state.completed_batches == 0 and evaluation.at_start and state.metrics_bytes == 0:
            self.evaluate(step=0)
            state = state.model_copy(update={"metrics_bytes": self.metrics.jsonl.size})
            self.run.write_state(state)

        group_size = assignment.rollout.group_size
        progress = tqdm(total=total, initial=state.completed_batches, unit="batch",
                        disable=not self.show_progress, dynamic_ncols=True)
        try:
            for batch_index in range(state.completed_batches, total):
                torch.manual_seed(_episode_seed(assignment.random_seed, batch_index, 0))
                samples = [task.get_sample(sample_id) for sample_id in schedule.batches[batch_index]]
                pairs = [(sample, g) for sample in samples for g in range(group_size)]
                episodes = self.run_episodes(pairs, batch_index)
                records = [episode.to_record() for episode in episodes]
                self.runs_log.append(record.model_dump(mode="json") for record in records)

                step = batch_index + 1
                metrics = episode_statistics(records, prefix="rollout/")
                metrics.update(task_metrics(records, "rollout/"))
                context = BatchContext(batch_index, episodes, group_size)
                for callback in callbacks.values():
                    metrics.update(callback.on_batch_end(context))
                for language_model in self.components.language_models.values():
                    metrics.update(language_model.drain_metrics())
                self.metrics.log(step, metrics)
                if evaluation.every_n_batches and step % evaluation.every_n_batches == 0 or evaluation.at_end and step == total:
                    self.evaluate(step)

                for callback_id, callback in callbacks.items():
                    with atomic_directory(self.run.checkpoint_dir(callback_id, step)) as folder:
                        callback.save_state(folder)
                state = RunState(completed_batches=step, runs_bytes=self.runs_log.size,
                                 metrics_bytes=self.metrics.jsonl.size)
                self.run.write_state(state)
                for callback_id in callbacks:
                    self.run.prune_checkpoints(callback_id, CHECKPOINTS_KEPT, step)
                progress.update(1)
                progress.set_postfix(reward=f"{metrics.get('rollout/reward', 0.0):.3f}",
                                     success=f"{metrics.get('rollout/success_rate', 0.0):.2f}")
        finally:
            progress.close()
            self.metrics.close()
            for task_instance in self._tasks:
                task_instance.close()

        records = [EpisodeRecord.model_validate(row) for row in self.runs_log.read()]
        summary = summarize(records)
        self.run.write_summary(summary)
        self.run.write_state(state.model_copy(update={"finished": True}))
        return summary
