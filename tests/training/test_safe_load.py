"""Resuming never unpickles code: a crafted checkpoint file is refused without running,
while the generators' state (this format and the earlier one) comes back exactly; a state
that is a whole file but not one the generators take is named as damaged, and sets none."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from src.storage.files import DamagedRunFolder
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


def _python_words(state: dict, words: torch.Tensor) -> None:
    state["python"][1] = words


def _numpy_keys(state: dict, keys: torch.Tensor) -> None:
    state["numpy"][1] = keys


DAMAGED_STATES = {  # what a file's bytes changed in place can leave, whole and readable
    "a negative Python word": lambda s: s["python"][1].fill_(-1),
    "a Python word beyond 32 bits": lambda s: s["python"][1].fill_(2**40),
    "too few Python words": lambda s: _python_words(s, s["python"][1][:10]),
    "an unknown Python version": lambda s: s["python"].__setitem__(0, 99),
    "a cached Gaussian that is text": lambda s: s["python"].__setitem__(2, "x"),
    "a negative NumPy key": lambda s: s["numpy"][1].fill_(-5),
    "a NumPy key beyond 32 bits": lambda s: s["numpy"][1].fill_(2**33),
    "too few NumPy keys": lambda s: _numpy_keys(s, s["numpy"][1][:3]),
    "a torch state cut short": lambda s: s.__setitem__("torch", s["torch"][:10]),
    "Python's state not a list": lambda s: s.__setitem__("python", 5),
    "no torch state": lambda s: s.pop("torch"),
}


@pytest.mark.parametrize("case", list(DAMAGED_STATES))
def test_a_state_the_generators_do_not_take_is_named_and_sets_none(tmp_path: Path,
                                                                   case: str) -> None:
    path = tmp_path / "rng_state.pt"
    save_rng_state(path)
    state = torch.load(path, weights_only=True)
    DAMAGED_STATES[case](state)
    torch.save(state, path)
    torch.manual_seed(6)
    random.seed(6)
    np.random.seed(6)
    expected = draws()
    torch.manual_seed(6)
    random.seed(6)
    np.random.seed(6)
    with pytest.raises(DamagedRunFolder,
                       match=f"{path}: not the random-generator state a checkpoint holds"):
        load_rng_state(path)
    assert draws() == expected


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
