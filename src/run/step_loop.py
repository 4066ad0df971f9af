"""The step loop every pipeline runs: restore to the last commit, then step by step train,
evaluate when due, log the step's figures and commit them; then finish.

A pipeline supplies its `Steps`: its stateful parts, the work of one step (an online
batch, a supervised optimiser step, an offline epoch) and its evaluation. The loop owns
the order, so that a step is logged, committed and published the same way in every
pipeline (src.run.protocol says what a commit writes):

    restore -> [figures at the start] -> for each step: step -> evaluate when due ->
    log -> commit (the trackers get the committed rows and the step's episodes) -> finish
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from src.records.episode import EpisodeRecord
from src.run.folder import RunDirectory, RunState
from src.run.metrics import MetricsLog
from src.run.protocol import Part, RunProtocol
from src.storage.files import JsonlLog


@dataclass(frozen=True)
class StepReport:
    """What one step did: its figures (logged, and read by the best rules at the commit)
    and the episodes it rolled out (their table goes to the trackers once committed)."""

    figures: dict[str, float]
    episodes: Sequence[EpisodeRecord] = ()
    # False: a step between commit points (supervised training commits every
    # `save_every_steps`), neither evaluated, logged nor committed
    commit: bool = True
    postfix: dict[str, str] = field(default_factory=dict)  # shown beside the progress bar
    # the process's random generators as they were at the step's end, where the next step
    # started before this one is committed (a batch rolling out ahead, in another thread,
    # draws from them): the checkpoint keeps these. None: as they are at the commit
    rng_state: dict[str, Any] | None = None


class Steps(ABC):
    """A pipeline's part of the step loop."""

    unit: str  # what a step is, for the progress bar: batch, step, epoch
    total: int  # the steps of the whole run
    metrics: MetricsLog  # the run's metrics.jsonl and trackers
    # the evaluation's figures in a metrics row of their own after the step's (the online
    # pipeline's layout) rather than in the step's row
    evaluation_row_apart: bool = False

    @abstractmethod
    def parts(self) -> list[Part]:
        """The run's stateful parts, each with its checkpoint store."""

    def runs_log(self) -> JsonlLog | None:
        """The log of the run's episodes that a commit covers (None: no such log)."""
        return None

    def prepare(self) -> None:  # noqa: B027
        """Before the parts are restored (a trainer told the schedule it restores into)."""

    def restored(self, done: int) -> None:  # noqa: B027
        """The parts hold committed step `done`."""

    def progress_bar(self, done: int, show: bool) -> tqdm:
        """The bar the steps advance (one unit a step unless a pipeline says otherwise)."""
        return tqdm(total=self.total, initial=done, unit=self.unit, disable=not show,
                    dynamic_ncols=True)

    @abstractmethod
    def at_start(self) -> dict[str, float] | None:
        """The figures before the first step (the starting policy's evaluation, say);
        None: nothing logged at the start."""

    @abstractmethod
    def step(self, step: int, progress: tqdm) -> StepReport:
        """Do step `step` (counted from 1), advancing `progress`."""

    @abstractmethod
    def evaluation_due(self, step: int) -> bool: ...

    @abstractmethod
    def evaluate(self, step: int) -> dict[str, float]:
        """The held-out figures after step `step` (0: before the first)."""

    def summary(self, protocol: RunProtocol) -> dict:
        """The run's summary (summary.json), once every step is committed: how many steps,
        the best step's record and the last logged row."""
        return {f"{self.unit}s": self.total, "best": protocol.best(),
                "final": self.metrics.jsonl.read()[-1]}

    def close(self) -> None:  # noqa: B027
        """The run ended (finished, failed or interrupted)."""


def evaluate_apart(evaluate: Callable[..., dict[str, float]], step: int,
                   metrics: MetricsLog) -> dict[str, float]:
    """A held-out evaluation between a trainer's steps that leaves torch's generators as
    they were: sampling reseeds them, and training's dropout must not depend on it."""
    with torch.random.fork_rng():
        return evaluate(step, metrics=metrics)


def run_steps(steps: Steps, run: RunDirectory, state: RunState, show_progress: bool) -> dict:
    """Train the steps after the last committed one, committing as the steps say; the run's
    summary."""
    metrics = steps.metrics
    protocol = RunProtocol(run, metrics, steps.parts(), steps.runs_log())
    try:
        steps.prepare()
        # The logs cut back to the last commit: the step in flight is redone.
        done = protocol.restore(state)
        steps.restored(done)
        if done == 0 and state.metrics_bytes == 0:
            _log_start(steps, metrics, protocol)
        progress = steps.progress_bar(done, show_progress)
        try:
            for step in range(done + 1, steps.total + 1):
                report = steps.step(step, progress)
                if report.commit:
                    _commit(steps, step, report, metrics, protocol)
                    progress.set_postfix(report.postfix)
        finally:
            progress.close()
    finally:
        steps.close()  # first: a batch rolling out ahead stops before the trackers close
        metrics.close()
    summary = steps.summary(protocol)
    protocol.finish(summary)
    return summary


def _log_start(steps: Steps, metrics: MetricsLog, protocol: RunProtocol) -> None:
    figures = steps.at_start()
    if figures is None:
        return
    if figures:
        metrics.log(0, figures)
    protocol.logged_start()  # a resumed run does not log them again


def _commit(steps: Steps, step: int, report: StepReport, metrics: MetricsLog,
            protocol: RunProtocol) -> None:
    """Evaluate when due, log the step's figures and commit the step with them."""
    held_out = steps.evaluate(step) if steps.evaluation_due(step) else {}
    if not steps.evaluation_row_apart:
        metrics.log(step, report.figures | held_out)
    else:
        metrics.log(step, report.figures)
        if held_out:
            metrics.log(step, held_out)
    protocol.commit(step, report.figures | held_out, report.episodes, report.rng_state)
