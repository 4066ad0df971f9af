"""The run protocol every pipeline shares: restore to the last commit, commit a step.

A step is committed in one order whatever the pipeline (online RL batches, supervised
steps, offline epochs): every stateful part writes its checkpoint, then `run_state.json`
records the step and the logs' byte offsets (the commit point), then `best/` is promoted
and old checkpoints are pruned. A kill anywhere leaves either the previous commit point,
with everything after it discarded on restore, or the new one; `best/` only ever comes
from a committed step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from src.experiment.run_directory import RunDirectory, RunState
from src.storage.files import JsonlLog
from src.storage.state import Stateful
from src.training.checkpoints import CheckpointStore

CHECKPOINTS_KEPT = 3


@dataclass
class RunProtocol:
    """A run folder's logs and its stateful parts, each with its checkpoint store."""

    run: RunDirectory
    metrics: JsonlLog
    parts: list[tuple[CheckpointStore, Stateful]]
    runs_log: JsonlLog | None = None  # the online loop's episodes
    keep: int = CHECKPOINTS_KEPT
    state: RunState = field(default_factory=RunState)

    def restore(self, state: RunState) -> int:
        """Cut the logs back to the commit point, drop every checkpoint past it, and
        restore each part from it; the number of committed steps."""
        self.state = state
        if self.runs_log is not None:
            self.runs_log.truncate(state.runs_bytes)
        self.metrics.truncate(state.metrics_bytes)
        committed = state.completed_batches
        for store, owner in self.parts:
            store.prune(self.keep, committed)
            if committed > 0:
                store.promote_best(committed)  # a kill may have come between commit and copy
                owner.restore_state(store.path(committed))
        return committed

    def logged_start(self) -> None:
        """Record what was logged before the first step (the evaluation at step 0), so
        that a resumed run does not log it again."""
        self.state = self.state.model_copy(update={"metrics_bytes": self.metrics.size})
        self.run.write_state(self.state)

    def commit(self, step: int) -> None:
        """Every part's checkpoint, then the commit point, then best/ and pruning."""
        for store, owner in self.parts:
            with store.write(step) as folder:
                owner.save_state(folder)
        self.state = RunState(completed_batches=step,
                              runs_bytes=self.runs_log.size if self.runs_log else 0,
                              metrics_bytes=self.metrics.size)
        self.run.write_state(self.state)  # the commit point
        for store, _ in self.parts:
            store.promote_best(step)
            store.prune(self.keep, step)

    def finish(self, summary: dict) -> None:
        self.run.write_summary(summary)
        self.run.write_state(self.state.model_copy(update={"finished": True}))
