"""The one state protocol: a part keeps state when it subclasses Stateful and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.storage.state import Stateful, keeps_state


class Memory(Stateful):
    def __init__(self, on: bool) -> None:
        self.on = on

    @property
    def keeps_state(self) -> bool:
        return self.on

    def save_state(self, directory: Path) -> None:
        (directory / "memory").write_text("kept")

    def restore_state(self, directory: Path) -> None:
        self.restored = (directory / "memory").read_text()


class WithSaveStateButUndeclared:
    """A save_state method alone declares nothing."""

    def save_state(self, directory: Path) -> None: ...

    def restore_state(self, directory: Path) -> None: ...


def test_state_is_declared_not_discovered() -> None:
    assert keeps_state(Memory(on=True))
    assert not keeps_state(Memory(on=False))  # a memory configured off
    assert not keeps_state(WithSaveStateButUndeclared())
    assert not keeps_state(object())


def test_a_stateful_part_must_write_and_read_its_state() -> None:
    class Half(Stateful):
        def save_state(self, directory: Path) -> None: ...

    with pytest.raises(TypeError, match="restore_state"):
        Half()  # type: ignore[abstract]
