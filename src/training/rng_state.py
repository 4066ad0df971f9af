"""Saving and restoring every random generator a training step draws from.

A commit saves the generators as they are, or as a caller took them earlier
(`current_rng_state` then `saving_rng_state`): with a rollout running ahead in another
thread, the process-global generators move with its episodes while a batch is committed,
so the run protocol takes them at the batch boundary and saves that.

The file holds tensors, lists and numbers only and is read with `weights_only=True`: a run
folder may come from someone else, and resuming from it must never unpickle code. Files
of the earlier format (NumPy's state as an array inside the pickle) still load: NumPy's
array reconstruction is the one thing allowed beside the plain types.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np
import torch

from src.storage.files import DamagedRunFolder
from src.training.safe_load import load_plain

# NumPy 2 moved its core to numpy._core; 1.26 (the oldest this project takes) has numpy.core
_reconstruct = (np._core if hasattr(np, "_core") else np.core).multiarray._reconstruct
# what an earlier file's NumPy state needs, under the names NumPy 1 and 2 pickle it by
_EARLIER_NUMPY_STATE = [_reconstruct, (_reconstruct, "numpy.core.multiarray._reconstruct"),
                        (_reconstruct, "numpy._core.multiarray._reconstruct"),
                        np.ndarray, np.dtype, np.dtypes.UInt32DType]


# the state `save_rng_state` writes in place of the live one (in this thread only)
_TO_SAVE: ContextVar[dict[str, Any] | None] = ContextVar("rng_state_to_save", default=None)


def current_rng_state() -> dict[str, Any]:
    """Every generator's state now, as `save_rng_state` writes it."""
    version, words, gauss = random.getstate()
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": [version, torch.tensor(words, dtype=torch.int64), gauss],
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss,
                  cached_gaussian],
    }
    if torch.cuda.is_available():  # dropout on the GPU draws from the CUDA generators
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


@contextmanager
def saving_rng_state(state: dict[str, Any] | None) -> Iterator[None]:
    """Within the block, `save_rng_state` writes `state` (taken by `current_rng_state`)
    rather than the generators as they are then; None: as they are."""
    token = _TO_SAVE.set(state)
    try:
        yield
    finally:
        _TO_SAVE.reset(token)


def save_rng_state(path: Path) -> None:
    state = _TO_SAVE.get()
    torch.save(current_rng_state() if state is None else state, path)


def load_rng_state(path: Path) -> None:
    """Set every generator to the state saved in `path`; DamagedRunFolder naming the file
    where it is not a state the generators take (Python's, NumPy's and torch's are each
    tried on a generator of their own first, so that a damaged file sets none of them)."""
    state = load_plain(path, allowed=_EARLIER_NUMPY_STATE)
    try:
        if not isinstance(state, dict) or not {"torch", "python", "numpy"} <= set(state):
            raise ValueError("no mapping of the torch, python and numpy generators")
        version, words, gauss = state["python"]
        if not (gauss is None or isinstance(gauss, float)):
            raise ValueError(f"Python's cached Gaussian is {type(gauss).__name__}")
        python = (version, tuple(int(word) for word in _listed(words)), gauss)
        name, keys, position, has_gauss, cached_gaussian = state["numpy"]
        numpy_state = (name, np.asarray(_listed(keys), dtype=np.int64).astype(np.uint32),
                       position, has_gauss, cached_gaussian)
        if not np.array_equal(numpy_state[1], _listed(keys)):
            raise ValueError("NumPy's key holds numbers outside 32 bits")
        random.Random().setstate(python)
        np.random.RandomState().set_state(numpy_state)
        torch.Generator().set_state(state["torch"])
        torch.set_rng_state(state["torch"])
        random.setstate(python)
        np.random.set_state(numpy_state)
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
    except (ValueError, TypeError, OverflowError, IndexError, RuntimeError) as error:
        raise DamagedRunFolder(f"{path}: not the random-generator state a checkpoint holds "
                               f"({type(error).__name__}: {error})") from error


def _listed(values: Any) -> list[int]:
    """A tensor's, an array's or a tuple's numbers as a list."""
    return values.tolist() if hasattr(values, "tolist") else list(values)
