"""The one state protocol of a run's parts: a trainer, a task family, an agent.

A part that a resumed run must restore declares it by subclassing `Stateful`; nothing
else is asked of it. The run protocol (src.run.protocol) gives each such part
a checkpoint store and calls `save_state` into a fresh folder at every commit and
`restore_state` from the last committed one on resume.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path


class Stateful(ABC):
    """A part whose state a resumed run restores."""

    @property
    def keeps_state(self) -> bool:
        """Whether this instance has state to keep: a family whose memory is configured
        off has none, and is then checkpointed by no one."""
        return True

    @abstractmethod
    def save_state(self, directory: Path) -> None:
        """Write everything needed to resume into `directory` (empty, created by the run
        and renamed into place atomically afterwards)."""

    @abstractmethod
    def restore_state(self, directory: Path) -> None:
        """Read back what `save_state` wrote."""


def keeps_state(part: object) -> bool:
    """Whether `part` declared state and has some to keep."""
    return isinstance(part, Stateful) and part.keeps_state
