"""The callback contract: hooks on every event of the loop, and a state folder of its own.

Two kinds: an observer (`Callback`) is told what happened; a trainer (`EpisodeTrainer`)
is also called on purpose: told the run's schedule before the first batch, asked to train
on each batch's finished episodes (returning its metrics), and handed the step's figures
(its own, the rollout's and the held-out evaluation's) to choose its best checkpoint by.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from src.language_models.language_model import NamesModels
from src.records.episode import Episode
from src.run.protocol import BestRule
from src.storage.state import Stateful


@dataclass(frozen=True)
class BatchContext:
    """What a callback sees at the end of a batch."""

    batch_index: int
    episodes: Sequence[Episode]
    group_size: int


@dataclass(frozen=True)
class TrainingSchedule:
    """What a trainer is told before the first batch of a run (or of its resumption)."""

    total_batches: int  # the schedule's length
    episodes_per_batch: int  # a full batch's episodes: samples x group size


class Callback(NamesModels, Stateful):
    """Override the hooks you need; all default to doing nothing.

    `save_state(directory)` writes everything needed to resume into a fresh folder the
    loop provides (it is renamed into place atomically afterwards);
    `restore_state(directory)` reads it back.

    With `rollout.max_staleness: 1` the episode hooks (`on_session_created` to
    `on_task_complete`) of the next batch run in the rollout thread while a trainer's
    `train` and the observers' `on_batch_end` of the current one run in the main thread:
    state they share needs a lock.
    """

    callback_id: str = ""

    def on_run_start(self, total_batches: int,  # noqa: B027
                     episodes_per_batch: int | None = None) -> None:
        """The run (or its resumption) starts; `total_batches` is the schedule's length and
        `episodes_per_batch` the episodes of a full batch (samples x group size)."""

    def on_session_created(self, episode: Episode) -> None:  # noqa: B027
        """An episode was created for a sample (before the task's reset)."""

    def on_task_reset(self, episode: Episode) -> None:  # noqa: B027
        """The task returned the first observation."""

    def on_agent_inference(self, episodes: Sequence[Episode]) -> None:  # noqa: B027
        """The agent replied to these episodes (one batched call)."""

    def on_task_interact(self, episode: Episode) -> None:  # noqa: B027
        """The task acted on the agent's reply."""

    def on_task_complete(self, episode: Episode) -> None:  # noqa: B027
        """The episode ended (any status)."""

    def on_batch_end(self, batch: BatchContext) -> dict[str, float]:
        """All episodes of the batch ended; return metrics to log."""
        return {}

    def on_evaluation(self, step: int, metrics: dict[str, float]) -> None:  # noqa: B027
        """The held-out evaluation after `step` batches (0: before the first) ended; its
        figures, under each split's prefix. It comes after `on_batch_end` and before
        `save_state` of the same step."""

    def save_state(self, directory: Path) -> None:
        """Write the callback's state into `directory` (empty, created by the loop)."""

    def restore_state(self, directory: Path) -> None:
        """Read back what save_state wrote."""

    def close(self) -> None:  # noqa: B027
        """The run ended (finished, failed or interrupted): release processes it started."""


class EpisodeTrainer(Callback):
    """A callback the loop trains through: `prepare` once the schedule is known, `train`
    after each batch, `best_rule` for the run protocol to choose its best checkpoint by.
    Its other hooks are an observer's."""

    @abstractmethod
    def prepare(self, schedule: TrainingSchedule) -> None:
        """The run (or its resumption) starts with this schedule; raise ValueError for one
        this trainer cannot follow."""

    @abstractmethod
    def train(self, batch: BatchContext) -> dict[str, float]:
        """Train on the batch's finished episodes; the metrics to log."""

    @property
    def best_rule(self) -> BestRule | None:
        """How the run protocol chooses this trainer's best checkpoint among the committed
        steps, from the figures each step is committed with (the trainer's metrics, the
        rollout's and any evaluation's, under their logged names); None: no best/."""
        return None

    @classmethod
    def oldest_trained(cls, parameters: Mapping[str, object]) -> int | None:
        """How many updates old an episode may be and still be trained on by a trainer of
        these (configured) parameters; None: any. Checked against rollout.max_staleness
        before any weights load."""
        return None
