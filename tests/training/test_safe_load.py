"""Resuming never unpickles code: a crafted checkpoint file is refused without running,
while the generators' state (this format and the earlier one) comes back exactly."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from src.training.rng_state import load_rng_state, save_rng_state
from src.training.safe_load import load_plain


class Payload:
    """Unpickling it runs a shell command that leaves a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("name", ["rng_state.pt", "optimizer_state.pt", "logprobs.pt"])
def test_a_crafted_file_is_refused_and_runs_nothing(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "ran"
    crafted = tmp_path / name
    torch.save({"torch": torch.get_rng_state(), "optimizer": Payload(marker)}, crafted)
    with pytest.raises(ValueError, match=f"{name}: refused or unreadable"):
        load_rng_state(crafted) if name == "rng_state.pt" else load_plain(crafted)
    assert not marker.exists()


def test_a_damaged_file_is_a_clear_error(tmp_path: Path) -> None:
    damaged = tmp_path / "rng_state.pt"
    save_rng_state(damaged)
    damaged.write_bytes(damaged.read_bytes()[:100])
    with pytest.raises(ValueError, match="rng_state.pt: refused or unreadable"):
        load_rng_state(damaged)


def draws() -> tuple[float, float, float]:
    return torch.rand(1).item(), random.random(), float(np.random.random())


def test_every_generator_comes_back_exactly(tmp_path: Path) -> None:
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    random.gauss(0, 1)  # a cached Gaussian in Python's state too
    np.random.standard_normal()
    save_rng_state(tmp_path / "rng_state.pt")
    expected = draws()
    draws()
    load_rng_state(tmp_path / "rng_state.pt")
    assert draws() == expected


def test_the_earlier_format_still_loads(tmp_path: Path) -> None:
    # as checkpoints were written before: the generators' own state objects, pickled
    random.seed(4)
    np.random.seed(4)
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate(),
                "numpy": np.random.get_state()}, tmp_path / "rng_state.pt")
    expected = draws()
    load_rng_state(tmp_path / "rng_state.pt")
    assert draws() == expected
