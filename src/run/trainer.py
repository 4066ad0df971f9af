"""The trainer contract: what the online loop calls on purpose, and a state folder of its own.

A trainer is told the run's schedule before the first batch, asked to train on each
batch's finished episodes (returning its metrics), and handed nothing else: the run
protocol saves and restores its state with each commit and chooses its best checkpoint by
its `best_rule` from the figures the step is committed with (its own, the rollout's and
the held-out evaluation's). `callback_dict` in a config lists the run's trainers (the
name LifelongAgentBench gave them), each with its store `callback_state/<id>/`.
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
    """A batch's finished episodes, as a trainer trains on them."""

    batch_index: int
    episodes: Sequence[Episode]
    group_size: int


@dataclass(frozen=True)
class TrainingSchedule:
    """What a trainer is told before the first batch of a run (or of its resumption)."""

    total_batches: int  # the schedule's length
    episodes_per_batch: int  # a full batch's episodes: samples x group size


class Trainer(NamesModels, Stateful):
    """`prepare` once the schedule is known, `train` after each batch, `best_rule` for the
    run protocol to choose its best checkpoint by.

    `save_state(directory)` writes everything needed to resume into a fresh folder the
    protocol provides (renamed into place whole afterwards); `restore_state(directory)`
    reads it back. With `rollout.max_staleness: 1` the next batch rolls out in another
    thread while `train` runs.
    """

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

    def save_state(self, directory: Path) -> None:
        """Write the trainer's state into `directory` (empty, created by the protocol)."""

    def restore_state(self, directory: Path) -> None:
        """Read back what save_state wrote."""

    def close(self) -> None:  # noqa: B027
        """The run ended (finished, failed or interrupted): release processes it started."""
