"""Saving and restoring every random generator a training step draws from."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch


def save_rng_state(path: Path) -> None:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": np.random.get_state()}
    if torch.cuda.is_available():  # dropout on the GPU draws from the CUDA generators
        state["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(state, path)


def load_rng_state(path: Path) -> None:
    state = torch.load(path, weights_only=False)
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
