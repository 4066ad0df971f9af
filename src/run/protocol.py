"""The run protocol every pipeline shares: restore to the last commit, commit a step, and
choose the best checkpoint. A reader follows a step's commit here, top to bottom.

A step is committed in one order whatever the pipeline (online RL batches, supervised
steps, offline epochs):
  1. every stateful part writes its checkpoint (a trainer's, the task's, the agent's),
     each in a fresh folder renamed into place whole; where a part has a best rule and
     the step's figures make a new best by it, the protocol marks that checkpoint best
     (best.json in it) before the rename;
  2. `run_state.json` records the step and the logs' byte offsets: the commit point;
  3. the trackers get the step's metrics;
  4. a checkpoint marked best is copied to its store's `best/`, and old checkpoints are
     pruned (the last 3 kept).
A kill anywhere leaves either the previous commit point, with everything after it
discarded on restore, or the new one; `best/` only ever comes from a committed step, and a
restore finishes a copy a kill interrupted.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from src.run.folder import RunDirectory, RunState
from src.run.metrics import MetricsLog
from src.storage.checkpoint_store import CheckpointStore
from src.storage.files import JsonlLog, atomic_directory, atomic_write_json, read_json
from src.storage.state import Stateful
from src.training.training_state import ADAPTER, TRAINING_STEP

CHECKPOINTS_KEPT = 3
BEST = "best"  # a store's best/: the best checkpoint's adapter, training_step.json, best.json
BEST_MARK = "best.json"  # in a checkpoint: marked best; in best/: which step it holds


def improves(value: float | None, best: float | None,
             mode: Literal["max", "min"] = "max") -> bool:
    """The best-checkpoint rule of every pipeline: a step is a new best when its value is
    strictly better than the best so far, so that the earliest of equal values stays best;
    a step without the value, or with a value that is not a finite number (a NaN would
    stay best forever: nothing compares above it), never is."""
    if value is None or not math.isfinite(value):
        return False
    return best is None or (value > best if mode == "max" else value < best)


@dataclass(frozen=True)
class BestRule:
    """Which committed step's checkpoint a part's best/ holds: the one whose figure
    `metric` improves on every earlier step's (`improves`), among the steps whose figure
    `bound[0]` stays at or below `bound[1]` (offline training's KL to the reference)."""

    metric: str
    mode: Literal["max", "min"] = "max"
    bound: tuple[str, float] | None = None
    step_key: str = "step"  # the record's name for the step ("epoch" for offline training)

    def value(self, figures: Mapping[str, float]) -> float | None:
        """The step's value by this rule; None where the step cannot be best."""
        if self.bound is not None:
            name, limit = self.bound
            bounded = figures.get(name)
            if bounded is None or not bounded <= limit:
                return None
        return figures.get(self.metric)

    def record(self, step: int, value: float, figures: Mapping[str, float]) -> dict[str, Any]:
        record: dict[str, Any] = {self.step_key: step, "metric": self.metric, "value": value}
        if self.bound is not None:
            name, limit = self.bound
            record |= {name: figures[name],
                       "rule": f"{'largest' if self.mode == 'max' else 'smallest'} "
                               f"{self.metric} among {self.step_key}s with {name} <= {limit}"}
        return record


@dataclass
class Part:
    """A stateful part of the run, its checkpoint store and, for a trainer that keeps a
    best checkpoint, the rule that chooses it."""

    store: CheckpointStore
    owner: Stateful
    best_rule: BestRule | None = None
    best: dict[str, Any] | None = None  # the record of the best committed step

    def best_value(self) -> float | None:
        if self.best is None or self.best_rule is None:
            return None
        # best.json of runs written before the record named its value kept it by metric
        return self.best.get("value", self.best.get(self.best_rule.metric))


@dataclass
class RunProtocol:
    """A run folder's logs and its stateful parts, each with its checkpoint store."""

    run: RunDirectory
    metrics: MetricsLog  # the trackers get its rows once they are committed
    parts: list[Part]
    runs_log: JsonlLog | None = None  # the online loop's episodes
    keep: int = CHECKPOINTS_KEPT
    state: RunState = field(default_factory=RunState)

    def restore(self, state: RunState) -> int:
        """Cut the logs back to the commit point, drop every checkpoint past it, and
        restore each part from it; the number of committed steps."""
        self.state = state
        if self.runs_log is not None:
            self.runs_log.truncate(state.runs_bytes)
        self.metrics.restore(state.metrics_bytes)
        committed = state.completed_batches
        for part in self.parts:
            part.store.prune(self.keep, committed)
            if committed > 0:
                _promote_best(part.store, committed)  # a kill may have come before the copy
                part.owner.restore_state(part.store.path(committed))
            mark = part.store.root / BEST / BEST_MARK
            part.best = read_json(mark) if part.best_rule and mark.is_file() else None
        return committed

    def logged_start(self) -> None:
        """Record what was logged before the first step (the evaluation at step 0), so
        that a resumed run does not log it again."""
        self.state = self.state.model_copy(update={"metrics_bytes": self.metrics.jsonl.size})
        self.run.write_state(self.state)
        self.metrics.publish(self.state.metrics_bytes)

    def commit(self, step: int, figures: Mapping[str, float] | None = None) -> None:
        """Commit `step`, whose figures (training and held-out) the best rules read."""
        for part in self.parts:
            with part.store.write(step) as folder:
                part.owner.save_state(folder)
                self._mark_if_best(part, step, figures or {}, folder)
        self.state = RunState(completed_batches=step,
                              runs_bytes=self.runs_log.size if self.runs_log else 0,
                              metrics_bytes=self.metrics.jsonl.size)
        self.run.write_state(self.state)  # the commit point
        self.metrics.publish(self.state.metrics_bytes)
        for part in self.parts:
            _promote_best(part.store, step)
            part.store.prune(self.keep, step)

    @staticmethod
    def _mark_if_best(part: Part, step: int, figures: Mapping[str, float],
                      folder: Path) -> None:
        rule = part.best_rule
        if rule is None:
            return
        value = rule.value(figures)
        if improves(value, part.best_value(), rule.mode):
            assert value is not None  # improves() says so
            part.best = rule.record(step, value, figures)
            atomic_write_json(folder / BEST_MARK, part.best)

    def best(self) -> dict[str, Any] | None:
        """The best committed step's record (of the first part with a best rule)."""
        return next((part.best for part in self.parts if part.best_rule), None)

    def finish(self, summary: dict) -> None:
        self.run.write_summary(summary)
        self.run.write_state(self.state.model_copy(update={"finished": True}))


def _promote_best(store: CheckpointStore, step: int) -> None:
    """Copy checkpoint `step`'s adapter (and its policy version) to best/ if the step was
    marked best and best/ does not hold it yet (so doing it again after a resume is
    harmless)."""
    mark = store.path(step) / BEST_MARK
    if not mark.is_file():
        return
    record = read_json(mark)
    current = store.root / BEST / BEST_MARK
    if current.is_file() and read_json(current) == record:
        return
    with atomic_directory(store.root / BEST) as best:
        shutil.copytree(store.path(step) / ADAPTER, best / ADAPTER)
        if (store.path(step) / TRAINING_STEP).is_file():
            shutil.copy2(store.path(step) / TRAINING_STEP, best / TRAINING_STEP)
        atomic_write_json(best / BEST_MARK, record)
