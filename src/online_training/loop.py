"""The online pipeline's steps: batches of samples, G rollouts each, all episodes in
lockstep, trained on as each batch ends."""

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
from src.online_training.config import OnlineTrainingConfig
from src.online_training.dynamic_sampling import fill_batch_with_spread
from src.online_training.plan import Components
from src.records.episode import Episode, EpisodeRecord, Sample
from src.run.evaluation import Evaluator, task_metrics
from src.run.folder import RunDirectory
from src.run.metrics import MetricsLog, episode_statistics, summarize
from src.run.protocol import Part, RunProtocol
from src.run.rollout import episode_seed, roll_out_seeded
from src.run.step_loop import StepReport, Steps
from src.run.trainer import BatchContext, TrainingSchedule
from src.run.worker_thread import WorkerThread
from src.storage.files import JsonlLog
from src.storage.state import keeps_state
from src.tasks.task import Task
from src.training.rng_state import current_rng_state

logger = logging.getLogger(__name__)
RETRY_SLOTS = 1_000_000  # a retried batch's episodes are seeded from this slot on
# a batch's episodes, the ones its update sees, and its rollout figures
RolledOut = tuple[list[Episode], list[Episode], dict[str, float]]


@dataclass(frozen=True)
class Schedule:
    """Which sample ids each batch holds, derived from the config alone (so resumable)."""

    batches: list[list[str]]

    @classmethod
    def build(cls, sample_ids: Sequence[str], config: OnlineTrainingConfig) -> Schedule:
        rollout = config.rollout
        order = config.sample_order
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
                    random.Random(f"{config.random_seed}-{epoch}").shuffle(ids)
            size = rollout.batch_size
            batches += [ids[start:start + size] for start in range(0, len(ids), size)]
        if rollout.max_batches is not None:
            batches = batches[: rollout.max_batches]
        return cls(batches)


def online_evaluator(config: OnlineTrainingConfig, task: Task[Any], agent: Agent) -> Evaluator:
    """The evaluator the `evaluation` settings describe."""
    rollout, evaluation = config.rollout, config.evaluation
    return Evaluator(task, agent, evaluation.splits, evaluation.max_samples,
                     evaluation.temperature,
                     evaluation.batch_size or rollout.batch_size * rollout.group_size,
                     config.random_seed, rollout.faults)


class OnlineTraining(Steps):
    """The online pipeline's steps: each a batch of samples rolled out `group_size` times
    and trained on by the run's trainers."""

    unit = "batch"
    # the trackers and the run page read an evaluation's figures as a row of their own
    evaluation_row_apart = True

    def __init__(self, config: OnlineTrainingConfig, components: Components,
                 run: RunDirectory) -> None:
        self.config = config
        self.components = components
        self.run = run
        self.episodes_log = JsonlLog(run.path / "runs.jsonl")
        self.metrics = MetricsLog(run.path, config.trackers)
        # the task family, built once: every episode of the run is one of its environments
        self.task: Task[Any] = components.make_task()
        if config.rollout.max_staleness and keeps_state(self.task):
            raise ValueError(
                f"assignment_config.rollout.max_staleness is {config.rollout.max_staleness}, "
                f"but the task {type(self.task).__name__} keeps a memory learnt from episodes, "
                "which the batch sampled ahead would reach before that batch is committed; "
                "use max_staleness 0 with it (or turn its memory off)")
        self.evaluator = online_evaluator(config, self.task, components.agent)
        self.batches = Schedule.build(self.task.sample_ids("train"), config).batches
        self.total = len(self.batches)
        self.skipped_in_a_row = 0
        # rollout.max_staleness 1: the next batch rolls out in this thread during the update
        self.rollout_thread = (WorkerThread("rollout-ahead") if config.rollout.max_staleness
                               else None)
        self.ahead: Future[RolledOut] | None = None

    # ---- episodes ------------------------------------------------------------------
    def run_episodes(self, samples: Sequence[tuple[Sample, int]], batch_index: int,
                     first_slot: int = 0) -> list[Episode]:
        """Roll out (sample, group_index) pairs together until every episode ends."""
        return roll_out_seeded(samples, self.task, self.components.agent, batch_index,
                               self.config.random_seed, self.config.rollout.faults,
                               first_slot)

    def roll_out_batch(self, sample_ids: Sequence[str], batch_index: int, attempt: int = 0
                       ) -> RolledOut:
        """Every episode drawn for the batch, the ones the update sees, and metrics.

        With dynamic sampling, refills come from train samples not yet in the batch, drawn
        by a generator seeded by the batch (so a resumed batch draws the same ones). A
        retried batch (`attempt` 1) uses other episode seeds."""
        group_size = self.config.rollout.group_size
        samples = [self.task.get_sample(sample_id) for sample_id in sample_ids]
        first_slot = attempt * RETRY_SLOTS
        episodes = self.run_episodes([(s, g) for s in samples for g in range(group_size)],
                                     batch_index, first_slot=first_slot)
        dynamic = self.config.rollout.dynamic_sampling
        if dynamic is None:
            return episodes, episodes, {}
        train_ids = list(self.task.sample_ids("train"))
        drawn_so_far = [first_slot + len(episodes)]

        def draw(missing: int, used: set[str]) -> list[Episode]:
            generator = random.Random(f"{self.config.random_seed}-refill-{batch_index}-"
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
                                     ) -> RolledOut:
        """`roll_out_batch`, once more with other seeds when more than the policy's share
        of its episodes failed; if the second try fails too, nothing is trained on."""
        faults = self.config.rollout.faults
        started = time.perf_counter()
        for attempt in range(2):
            torch.manual_seed(episode_seed(self.config.random_seed, batch_index,
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

    def _rolled_out(self, batch_index: int) -> RolledOut:
        """Batch `batch_index`'s episodes: rolled out now, or ahead during the last update."""
        if self.ahead is None:  # the first batch of a run or of its resumption
            logger.info("batch %d of %d: rolling out", batch_index + 1, self.total)
            return self.roll_out_within_fault_policy(self.batches[batch_index], batch_index)
        rolled_out, self.ahead = self.ahead.result(), None
        return rolled_out

    def _roll_out_ahead(self, batch_index: int) -> dict[str, Any] | None:
        """Start rolling out `batch_index` in the rollout thread from the policy as it is
        now (the samplers' copies brought up to date here, before the update changes it):
        its samples are one update old when trained on, which each one's version records.
        The process's random generators as they were before it starts (the commit saves
        those: a checkpoint never holds a stream of an episode in flight)."""
        if self.rollout_thread is None or batch_index >= self.total:
            return None
        boundary = current_rng_state()
        self._serve_latest_policy()
        logger.info("batch %d of %d: rolling out during the previous update",
                    batch_index + 1, self.total)
        self.ahead = self.rollout_thread.submit(functools.partial(
            self.roll_out_within_fault_policy, self.batches[batch_index], batch_index))
        return boundary

    def _serve_latest_policy(self) -> None:
        for language_model in self.components.language_models.values():
            language_model.serve_latest_policy()

    # ---- the steps, as the step loop runs them -------------------------------------
    def parts(self) -> list[Part]:
        """Each trainer's checkpoints, then the task family's and the agent's where they
        keep state: one store each."""
        parts = [Part(self.run.callback_store(trainer_id), trainer, trainer.best_rule)
                 for trainer_id, trainer in self.components.trainers.items()]
        if keeps_state(self.task):
            parts.append(Part(self.run.task_store(), self.task))
        if keeps_state(self.components.agent):
            parts.append(Part(self.run.agent_store(), self.components.agent))
        return parts

    def runs_log(self) -> JsonlLog:
        return self.episodes_log

    def prepare(self) -> None:
        rollout = self.config.rollout
        schedule = TrainingSchedule(self.total, rollout.batch_size * rollout.group_size)
        for trainer in self.components.trainers.values():
            trainer.prepare(schedule)

    def at_start(self) -> dict[str, float] | None:
        return self.evaluate(0) if self.config.evaluation.at_start else None

    def step(self, step: int, progress: tqdm) -> StepReport:
        """Batch `step`: its episodes (rolled out now or ahead), the next batch started
        ahead where the run overlaps them, then every trainer's update."""
        batch_index = step - 1
        started = time.perf_counter()
        episodes, trained, metrics = self._rolled_out(batch_index)
        # what the trainer waited for sampling (with overlap: the part not hidden)
        metrics["time/waiting_for_rollout_seconds"] = time.perf_counter() - started
        boundary = self._roll_out_ahead(batch_index + 1)
        self._check_skipped(batch_index, bool(metrics["batch/skipped"]))
        records = [episode.to_record() for episode in episodes]
        self.episodes_log.append(record.model_dump(mode="json") for record in records)
        metrics.update(episode_statistics(records, prefix="rollout/"))
        metrics.update(task_metrics(records, "rollout/"))
        context = BatchContext(batch_index, trained, self.config.rollout.group_size)
        updating = time.perf_counter()
        for trainer in self.components.trainers.values():
            metrics.update(trainer.train(context))
        metrics["time/update_seconds"] = time.perf_counter() - updating
        for language_model in self.components.language_models.values():
            metrics.update(language_model.drain_metrics())
        progress.update(1)
        return StepReport(metrics, records, rng_state=boundary, postfix={
            "reward": f"{metrics.get('rollout/reward', 0.0):.3f}",
            "success": f"{metrics.get('rollout/success_rate', 0.0):.2f}"})

    def _check_skipped(self, batch_index: int, skipped: bool) -> None:
        self.skipped_in_a_row = self.skipped_in_a_row + 1 if skipped else 0
        if self.skipped_in_a_row > self.config.rollout.faults.max_skipped_in_a_row:
            raise RuntimeError(
                f"batch {batch_index}: {self.skipped_in_a_row} batches in a row skipped, "
                f"more than rollout.faults.max_skipped_in_a_row; the failures are in "
                f"the log above and in runs.jsonl")

    def evaluation_due(self, step: int) -> bool:
        evaluation = self.config.evaluation
        return bool(evaluation.every_n_batches and step % evaluation.every_n_batches == 0
                    or evaluation.at_end and step == self.total)

    def evaluate(self, step: int) -> dict[str, float]:
        """Each of `evaluation.splits` from step `step`'s policy, whatever a pool's
        max_staleness (the batch rolling out ahead finishes first: it samples through the
        same agent)."""
        if self.ahead is not None:
            wait([self.ahead])
        self._serve_latest_policy()
        return self.evaluator.evaluate(step, self.run.path, self.metrics)

    def summary(self, protocol: RunProtocol) -> dict:
        records = [EpisodeRecord.model_validate(row) for row in self.episodes_log.read()]
        return summarize(records)

    def close(self) -> None:
        if self.rollout_thread is not None:
            # a batch still rolling out after a failure is dropped: never committed
            self.rollout_thread.stop()
        self.task.close()
        for trainer in self.components.trainers.values():
            trainer.close()
