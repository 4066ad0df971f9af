"""The experiment loop: batches of samples, G rollouts each, all episodes in lockstep."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from src.agents.agent import Agent
from src.configuration.assignment import AssignmentConfig
from src.online_training.dynamic_sampling import fill_batch_with_spread
from src.records.episode import Episode, EpisodeRecord, Sample
from src.run.assembly import Components
from src.run.callbacks import BatchContext, EpisodeTrainer, TrainingSchedule
from src.run.evaluation import Evaluator, task_metrics
from src.run.folder import RunDirectory, RunState
from src.run.metrics import MetricsLog, episode_statistics, summarize
from src.run.protocol import Part, RunProtocol
from src.run.rollout import episode_seed, roll_out_seeded
from src.run.worker_thread import WorkerThread
from src.storage.files import JsonlLog
from src.storage.state import keeps_state
from src.tasks.task import Task

logger = logging.getLogger(__name__)
RETRY_SLOTS = 1_000_000  # a retried batch's episodes are seeded from this slot on


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


def assignment_evaluator(assignment: AssignmentConfig, task: Task[Any],
                         agent: Agent) -> Evaluator:
    """The evaluator an assignment's `evaluation` settings describe."""
    rollout, evaluation = assignment.rollout, assignment.evaluation
    return Evaluator(task, agent, evaluation.splits, evaluation.max_samples,
                     evaluation.temperature,
                     evaluation.batch_size or rollout.batch_size * rollout.group_size,
                     assignment.random_seed, rollout.faults)


class ExperimentLoop:
    def __init__(self, assignment: AssignmentConfig, components: Components,
                 run: RunDirectory, show_progress: bool = True) -> None:
        self.assignment = assignment
        self.components = components
        self.run = run
        self.show_progress = show_progress
        self.runs_log = JsonlLog(run.path / "runs.jsonl")
        self.metrics = MetricsLog(run.path, assignment.trackers)
        # the task family, built once: every episode of the run is one of its environments
        self.task: Task[Any] = components.make_task()
        if assignment.rollout.max_staleness and keeps_state(self.task):
            raise ValueError(
                f"assignment_config.rollout.max_staleness is {assignment.rollout.max_staleness}, "
                f"but the task {type(self.task).__name__} keeps a memory learnt from episodes, "
                "which the batch sampled ahead would reach before that batch is committed; "
                "use max_staleness 0 with it (or turn its memory off)")
        self.evaluator = assignment_evaluator(assignment, self.task, components.agent)

    # ---- episodes ------------------------------------------------------------------
    def run_episodes(self, samples: Sequence[tuple[Sample, int]], batch_index: int,
                     notify_callbacks: bool = True, first_slot: int = 0) -> list[Episode]:
        """Roll out (sample, group_index) pairs together until every episode ends."""
        callbacks = list(self.components.callbacks.values()) if notify_callbacks else []
        return roll_out_seeded(samples, self.task, self.components.agent, batch_index,
                               self.assignment.random_seed, self.assignment.rollout.faults,
                               callbacks, first_slot)

    def roll_out_batch(self, sample_ids: Sequence[str], batch_index: int, attempt: int = 0
                       ) -> tuple[list[Episode], list[Episode], dict[str, float]]:
        """Every episode drawn for the batch, the ones the update sees, and metrics.

        With dynamic sampling, refills come from train samples not yet in the batch, drawn
        by a generator seeded by the batch (so a resumed batch draws the same ones). A
        retried batch (`attempt` 1) uses other episode seeds."""
        group_size = self.assignment.rollout.group_size
        samples = [self.task.get_sample(sample_id) for sample_id in sample_ids]
        first_slot = attempt * RETRY_SLOTS
        episodes = self.run_episodes([(s, g) for s in samples for g in range(group_size)],
                                     batch_index, first_slot=first_slot)
        dynamic = self.assignment.rollout.dynamic_sampling
        if dynamic is None:
            return episodes, episodes, {}
        train_ids = list(self.task.sample_ids("train"))
        drawn_so_far = [first_slot + len(episodes)]

        def draw(missing: int, used: set[str]) -> list[Episode]:
            generator = random.Random(f"{self.assignment.random_seed}-refill-{batch_index}-"
                                      f"{drawn_so_far[0]}")
            candidates = [sample_id for sample_id in train_ids if sample_id not in used]
            chosen = generator.sample(candidates, min(missing, len(candidates)))
            pairs = [(self.task.get_sample(i), g) for i in chosen for g in range(group_size)]
            extra = self.run_episodes(pairs, batch_index, first_slot=drawn_so_far[0])
            drawn_so_far[0] += len(extra)
            return extra

        filled = fill_batch_with_spread(episodes, len(sample_ids), dynamic.max_rounds, draw)
        return filled.episodes, filled.kept, filled.metrics(len(sample_ids))

    def roll_out_within_fault_policy(self, sample_ids: Sequence[str], batch_index: int
                                     ) -> tuple[list[Episode], list[Episode], dict[str, float]]:
        """`roll_out_batch`, once more with other seeds when more than the policy's share
        of its episodes failed; if the second try fails too, nothing is trained on."""
        faults = self.assignment.rollout.faults
        started = time.perf_counter()
        for attempt in range(2):
            torch.manual_seed(episode_seed(self.assignment.random_seed, batch_index,
                                           attempt * RETRY_SLOTS))
            episodes, trained, metrics = self.roll_out_batch(sample_ids, batch_index, attempt)
            failed_share = sum(e.status.failed for e in episodes) / len(episodes)
            if failed_share <= faults.max_failed_share:
                break
            logger.warning("batch %d, try %d: %.0f%% of the episodes failed (more than "
                           "rollout.faults.max_failed_share)", batch_index, attempt + 1,
                           100 * failed_share)
        skipped = failed_share > faults.max_failed_share
        return episodes, [] if skipped else trained, {
            **metrics, "batch/tries": float(attempt + 1), "batch/skipped": float(skipped),
            "time/rollout_seconds": time.perf_counter() - started}

    def _roll_out_ahead(self, thread: WorkerThread, sample_ids: Sequence[str],
                        batch_index: int, total: int
                        ) -> Future[tuple[list[Episode], list[Episode], dict[str, float]]]:
        """Start rolling out `batch_index` in `thread` from the policy as it is now (the
        samplers' copies brought up to date here, before the update changes it): its
        samples are one update old when trained on, which each one's version records."""
        self._serve_latest_policy()
        logger.info("batch %d of %d: rolling out during the previous update",
                    batch_index + 1, total)
        return thread.submit(functools.partial(self.roll_out_within_fault_policy,
                                               sample_ids, batch_index))

    def _serve_latest_policy(self) -> None:
        for language_model in self.components.language_models.values():
            language_model.serve_latest_policy()

    # ---- evaluation ----------------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float]:
        """Each of `evaluation.splits`; the callbacks see the figures, and the batch is
        committed with them (a trainer's best rule may read them)."""
        self._serve_latest_policy()  # whatever a pool's max_staleness: step `step`'s policy
        stats = self.evaluator.evaluate(step, self.run.path, self.metrics)
        if stats:
            self.metrics.log(step, stats)
            for callback in self.components.callbacks.values():
                callback.on_evaluation(step, stats)
        return stats

    # ---- the run -------------------------------------------------------------------
    def execute(self, state: RunState) -> dict:
        assignment = self.assignment
        callbacks = self.components.callbacks
        task = self.task
        schedule = Schedule.build(task.sample_ids("train"), assignment)
        total = len(schedule.batches)
        # Each callback's checkpoints, then the task family's and the agent's where they
        # keep state: one store each.
        parts = [Part(self.run.callback_store(callback_id), callback,
                      callback.best_rule if isinstance(callback, EpisodeTrainer) else None)
                 for callback_id, callback in callbacks.items()]
        if keeps_state(task):
            parts.append(Part(self.run.task_store(), task))
        if keeps_state(self.components.agent):
            parts.append(Part(self.run.agent_store(), self.components.agent))
        protocol = RunProtocol(self.run, self.metrics, parts, self.runs_log)
        episodes_per_batch = assignment.rollout.batch_size * assignment.rollout.group_size
        trainers = [callback for callback in callbacks.values()
                    if isinstance(callback, EpisodeTrainer)]
        for trainer in trainers:
            trainer.prepare(TrainingSchedule(total, episodes_per_batch))
        for callback in callbacks.values():
            callback.on_run_start(total, episodes_per_batch)
        # The logs cut back to the last committed batch: the batch in flight is redone.
        protocol.restore(state)
        evaluation = assignment.evaluation
        if state.completed_batches == 0 and evaluation.at_start and state.metrics_bytes == 0:
            self.evaluate(step=0)
            protocol.logged_start()

        group_size = assignment.rollout.group_size
        skipped_in_a_row = 0
        progress = tqdm(total=total, initial=state.completed_batches, unit="batch",
                        disable=not self.show_progress, dynamic_ncols=True)
        # rollout.max_staleness 1: the next batch rolls out in this thread during the update
        rollout_thread = WorkerThread("rollout-ahead") if assignment.rollout.max_staleness else None
        ahead: Future[tuple[list[Episode], list[Episode], dict[str, float]]] | None = None
        try:
            for batch_index in range(state.completed_batches, total):
                started = time.perf_counter()
                if ahead is None:  # the first batch of a run or of its resumption
                    logger.info("batch %d of %d: rolling out", batch_index + 1, total)
                    episodes, trained, metrics = self.roll_out_within_fault_policy(
                        schedule.batches[batch_index], batch_index)
                else:
                    episodes, trained, metrics = ahead.result()
                    ahead = None
                # what the trainer waited for sampling (with overlap: the part not hidden)
                metrics["time/waiting_for_rollout_seconds"] = time.perf_counter() - started
                if rollout_thread is not None and batch_index + 1 < total:
                    # the batch ahead moves the process's generators during this commit
                    protocol.mark_batch_boundary()
                    ahead = self._roll_out_ahead(rollout_thread,
                                                 schedule.batches[batch_index + 1],
                                                 batch_index + 1, total)
                skipped_in_a_row = skipped_in_a_row + 1 if metrics["batch/skipped"] else 0
                if skipped_in_a_row > assignment.rollout.faults.max_skipped_in_a_row:
                    raise RuntimeError(
                        f"batch {batch_index}: {skipped_in_a_row} batches in a row skipped, "
                        f"more than rollout.faults.max_skipped_in_a_row; the failures are in "
                        f"the log above and in runs.jsonl")
                records = [episode.to_record() for episode in episodes]
                self.runs_log.append(record.model_dump(mode="json") for record in records)

                step = batch_index + 1
                metrics.update(episode_statistics(records, prefix="rollout/"))
                metrics.update(task_metrics(records, "rollout/"))
                context = BatchContext(batch_index, trained, group_size)
                updating = time.perf_counter()
                for trainer in trainers:
                    metrics.update(trainer.train(context))
                metrics["time/update_seconds"] = time.perf_counter() - updating
                for callback in callbacks.values():
                    metrics.update(callback.on_batch_end(context))
                for language_model in self.components.language_models.values():
                    metrics.update(language_model.drain_metrics())
                self.metrics.log(step, metrics)
                figures = dict(metrics)
                if evaluation.every_n_batches and step % evaluation.every_n_batches == 0 or evaluation.at_end and step == total:
                    if ahead is not None:  # the evaluation samples through the same agent
                        wait([ahead])
                    figures.update(self.evaluate(step))
                protocol.commit(step, figures)
                # after the commit: a batch redone on resume may sample other episodes (on a
                # GPU), and the trackers should show the ones runs.jsonl keeps
                self.metrics.log_batch_episodes(step, records)
                progress.update(1)
                progress.set_postfix(reward=f"{metrics.get('rollout/reward', 0.0):.3f}",
                                     success=f"{metrics.get('rollout/success_rate', 0.0):.2f}")
        finally:
            if rollout_thread is not None:
                # a batch still rolling out after a failure is dropped: never committed
                rollout_thread.stop()
            progress.close()
            self.metrics.close()
            task.close()
            for callback in callbacks.values():
                callback.close()

        records = [EpisodeRecord.model_validate(row) for row in self.runs_log.read()]
        summary = summarize(records)
        protocol.finish(summary)
        return summary
