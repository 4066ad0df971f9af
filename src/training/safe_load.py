"""Reading a torch file of a run folder without running code.

`torch.load(..., weights_only=False)` unpickles whatever the file names, so a crafted
checkpoint runs code on resume; run folders and checkpoints may come from someone else.
Every torch file a run reads back goes through `load_plain`: tensors, containers and
numbers only (plus what a caller allows by name), and a damaged-run-folder error naming
the file for anything else, a damaged file included.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from src.storage.files import DamagedRunFolder


def load_plain(path: Path, allowed: Sequence[Any] = ()) -> Any:
    """The file's content, read with `weights_only=True` and the `allowed` globals
    (objects, or (object, pickled name) pairs); DamagedRunFolder (a ValueError) naming the
    file when it needs anything else or cannot be read."""
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OverflowError,
            TypeError, KeyError, IndexError) as error:  # what damaged bytes raise in places
        first_line = (str(error).splitlines() or [""])[0][:300]
        raise DamagedRunFolder(f"{path}: refused or unreadable ({type(error).__name__}: "
                               f"{first_line}); a checkpoint holds tensors and numbers "
                               "only, never code") from error
