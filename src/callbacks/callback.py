"""The callback contract: hooks on every event of the loop, and a state folder of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from src.records.episode import Episode


@dataclass(frozen=True)
class BatchContext:
    """What a callback sees at the end of a batch."""

    batch_index: int
    episodes: Sequence[Episode]
    group_size: int


class Callback:
    """Override the hooks you need; all default to doing nothing.

    `save_state(directory)` writes everything needed to resume into a fresh folder the
    loop provides (it is renamed into place atomically afterwards);
    `restore_state(directory)` reads it back.

    With `rollout.max_staleness: 1` the episode hooks (`on_session_created` to
    `on_task_complete`) of the next batch run in the rollout thread while `on_batch_end`
    of the current one runs in the main thread: state they share needs a lock.
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

    def save_state(self, directory: Path) -> None:  # noqa: B027
        """Write the callback's state into `directory` (empty, created by the loop)."""

    def restore_state(self, directory: Path) -> None:  # noqa: B027
        """Read back what save_state wrote."""

    def close(self) -> None:  # noqa: B027
        """The run ended (finished, failed or interrupted): release processes it started."""
