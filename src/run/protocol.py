"""The run protocol every pipeline shares: restore to the last commit, commit a step, and
choose the best checkpoint. A reader follows a step's commit here, top to bottom.

A step is committed in one order whatever the pipeline (online RL batches, supervised
steps, offline epochs):
  1. every stateful part writes its checkpoint (a trainer's, the task's, the agent's),
     each in a fresh folder renamed into place whole, with the sha256 of each file
     (checksums.json) written last; where a part has a best rule and the step's figures
     make a new best by it, the protocol marks that checkpoint best (best.json in it)
     before the rename. The random generators a trainer saves are the process's as they
     were at the step's end where the step says so (a batch rolling out ahead moves them
     meanwhile), else as they are;
  2. `run_state.json` records the step and the logs' byte offsets: the commit point;
  3. the trackers get the step's metrics and a table of its episodes;
  4. a checkpoint marked best is copied to its store's `best/`, and old checkpoints are
     pruned (the last 3 kept).
A kill anywhere leaves either the previous commit point, with everything after it
discarded on restore, or the new one; `best/` only ever comes from a committed step. A
restore finishes a copy a kill interrupted, and where the run resumes from before the step
`best/` holds (a damaged latest checkpoint removed), takes `best/` back to the best of the
steps it keeps, or to none.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from src.records.episode import EpisodeRecord
from src.run.folder import RunDirectory, RunState
from src.run.metrics import MetricsLog
from src.run.resume import damaged_checkpoint
from src.storage.checkpoint_store import (
    BEST,
    BEST_MARK,
    CheckpointStore,
    marked_step,
    read_checksums,
    write_checksums,
)
from src.storage.files import (
    DamagedRunFolder,
    JsonlLog,
    atomic_directory,
    atomic_write_json,
    read_json,
)
from src.storage.state import Stateful
from src.training.rng_state import saving_rng_state
from src.training.training_state import ADAPTER, TRAINING_STEP

CHECKPOINTS_KEPT = 3


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
        """Take each store back to the commit point (checkpoints past it dropped, best/ the
        best of the steps kept), cut the logs back to it and restore each part from its
        checkpoint; the number of committed steps."""
        self.state = state
        committed = state.completed_batches
        # before the logs are cut: they tell a step a resume goes back before from one the
        # run never reached
        for part in self.parts:
            part.store.prune(self.keep, committed)
            best = self._best_of_steps_kept(part.store, committed)
            part.best = best if part.best_rule else None
        if self.runs_log is not None:
            self.runs_log.truncate(state.runs_bytes)
        self.metrics.restore(state.metrics_bytes)
        for part in self.parts if committed > 0 else []:
            try:
                part.owner.restore_state(part.store.path(committed))
            except DamagedRunFolder as error:  # a file whose header and checksum passed
                raise DamagedRunFolder(damaged_checkpoint(
                    error, part.store, committed, [part.store for part in self.parts])
                ) from error
        return committed

    def _best_of_steps_kept(self, store: CheckpointStore, committed: int
                            ) -> dict[str, Any] | None:
        """best/ as the committed history has it, and its record: the newest checkpoint up
        to `committed` marked best, copied again where best/ does not hold it (a kill came
        before the copy, or best/ holds a step past `committed`, which a resume that went
        back before it discards); else best/ as it is, where it holds a committed step;
        else none. best/ naming a step the run never reached is refused."""
        marked = [step for step in store.steps()
                  if step <= committed and (store.path(step) / BEST_MARK).is_file()]
        held = store.best_record()
        held_step = None if held is None else marked_step(held, store.best_mark)
        discarded = held_step is not None and held_step > committed
        if discarded and held_step not in self._logged_steps():
            raise DamagedRunFolder(
                f"{store.best_mark}: names step {held_step}, which this run never reached "
                f"(it committed {committed}, and {self.metrics.jsonl.path} logs no step "
                f"{held_step}): best/ is not a checkpoint of this run. Put best/ back from a "
                f"copy of the run folder, or remove {store.root / BEST} (the run then "
                "chooses its best again from the checkpoints it keeps)")
        if marked and (held_step is None or discarded or held_step < marked[-1]):
            _promote_best(store, marked[-1])
            held = store.best_record()
        elif discarded:
            store.remove_best()
            held = None
        if discarded:
            print(f"{store.root / BEST} held step {held_step}, after step {committed} that "
                  "the run resumes from: "
                  + (f"it now holds step {marked[-1]}, the best of the steps kept" if marked
                     else f"removed (no checkpoint kept up to step {committed} was best)"))
        return held

    def _logged_steps(self) -> set[int]:
        """The steps metrics.jsonl holds rows of, those past the commit point included
        (until the logs are cut back)."""
        steps = set()
        with self.metrics.jsonl.path.open("rb") as stream:
            for line in stream:
                try:
                    row = json.loads(line)
                except ValueError:  # a row a kill cut short
                    continue
                if isinstance(row, dict) and isinstance(row.get("step"), int):
                    steps.add(row["step"])
        return steps

    def logged_start(self) -> None:
        """Record what was logged before the first step (the evaluation at step 0), so
        that a resumed run does not log it again."""
        self.state = self.state.model_copy(update={"metrics_bytes": self.metrics.jsonl.size})
        self.run.write_state(self.state)
        self.metrics.publish(self.state.metrics_bytes)

    def commit(self, step: int, figures: Mapping[str, float] | None = None,
               episodes: Sequence[EpisodeRecord] = (),
               rng_state: dict[str, Any] | None = None) -> None:
        """Commit `step`, whose figures (training and held-out) the best rules read; the
        trackers get the step's rows and a table of its `episodes` once it is committed (a
        step redone on resume may sample other episodes, on a GPU: the trackers show the
        ones runs.jsonl keeps). A trainer's checkpoint saves the random generators
        `rng_state` (the step's end, where the next step started before this commit), else
        as they are now."""
        with saving_rng_state(rng_state):
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
        self.metrics.log_batch_episodes(step, episodes)

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
    harmless). best/'s checksums of the copied files are the checkpoint's own."""
    source = store.path(step)
    mark = source / BEST_MARK
    if not mark.is_file():
        return
    record = read_json(mark)
    if store.best_record() == record:
        return
    recorded = read_checksums(source)
    with atomic_directory(store.root / BEST) as best:
        shutil.copytree(source / ADAPTER, best / ADAPTER)
        if (source / TRAINING_STEP).is_file():
            shutil.copy2(source / TRAINING_STEP, best / TRAINING_STEP)
        atomic_write_json(best / BEST_MARK, record)
        if recorded is not None:  # a checkpoint written before checksums were kept has none
            write_checksums(best, {name: digest for name, digest in recorded.items()
                                   if name.startswith(f"{ADAPTER}/") or name == TRAINING_STEP})
