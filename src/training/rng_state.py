"""Saving and restoring every random generator a training step draws from.

The file holds tensors, lists and numbers only and is read with `weights_only=True`: a run
folder may come from someone else, and resuming from it must never unpickle code. Files
of the earlier format (NumPy's state as an array inside the pickle) still load: NumPy's
array reconstruction is the one thing allowed beside the plain types.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from src.training.safe_load import load_plain

# NumPy 2 moved its core to numpy._core; 1.26 (the oldest this project takes) has numpy.core
_reconstruct = (np._core if hasattr(np, "_core") else np.core).multiarray._reconstruct
# what an earlier file's NumPy state needs, under the names NumPy 1 and 2 pickle it by
_EARLIER_NUMPY_STATE = [_reconstruct, (_reconstruct, "numpy.core.multiarray._reconstruct"),
                        (_reconstruct, "numpy._core.multiarray._reconstruct"),
                        np.ndarray, np.dtype, np.dtypes.UInt32DType]


def save_rng_state(path: Path) -> None:
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
    torch.save(state, path)


def load_rng_state(path: Path) -> None:
    state = load_plain(path, allowed=_EARLIER_NUMPY_STATE)
    if not isinstance(state, dict) or not {"torch", "python", "numpy"} <= set(state):
        raise ValueError(f"{path}: not the random-generator state a checkpoint holds")
    torch.set_rng_state(state["torch"])
    version, words, gauss = state["python"]
    random.setstate((version, tuple(int(word) for word in _listed(words)), gauss))
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, np.asarray(_listed(keys), dtype=np.uint32), position,
                         has_gauss, cached_gaussian))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _listed(values: Any) -> list[int]:
    """A tensor's, an array's or a tuple's numbers as a list."""
    return values.tolist() if hasattr(values, "tolist") else list(values)
