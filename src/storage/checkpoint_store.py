"""The checkpoint store of every stateful part of a run (a trainer, a task family, an
agent): a folder of `checkpoint-NNNNNN/` (NNNNNN: the steps committed), each written by
its owner into a fresh folder and renamed into place whole. What a checkpoint holds is its
owner's (a trainer's: src.training.training_state); which one is best, the run protocol's
(src.run.protocol).

`check_checkpoint` tells a damaged checkpoint (a file emptied or cut short by a copy, a
full disk outside the run, an edit) before anything loads from it.
"""

from __future__ import annotations

import shutil
import zipfile
from contextlib import AbstractContextManager
from pathlib import Path

from safetensors import SafetensorError, safe_open

from src.storage.files import (
    DamagedRunFolder,
    atomic_directory,
    read_json,
    remove_stale_temporaries,
)

PREFIX = "checkpoint-"


def check_checkpoint(folder: Path) -> None:
    """DamagedRunFolder naming the first file under `folder` (a checkpoint, best/ or an
    adapter folder) that cannot be what the run wrote: empty, a JSON file that is not
    JSON, a safetensors file whose header does not cover its length, a torch file that is
    not a whole zip archive (a file cut short loses the archive's directory, which is at
    its end). Headers and directories only: no tensor is read and nothing is unpickled, so
    this is cheap enough to run before any model loads."""
    if not folder.is_dir():
        raise DamagedRunFolder(f"{folder}: missing")
    for path in sorted(folder.rglob("*")):
        if path.suffix not in (".json", ".safetensors", ".pt") or not path.is_file():
            continue
        if path.stat().st_size == 0:
            raise DamagedRunFolder(f"{path}: empty (0 bytes)")
        if path.suffix == ".json":
            read_json(path)
        elif path.suffix == ".safetensors":
            try:
                with safe_open(path, "pt"):
                    pass
            except SafetensorError as error:
                raise DamagedRunFolder(f"{path}: not a whole safetensors file ({error})"
                                       ) from error
        else:
            try:
                with zipfile.ZipFile(path):
                    pass
            except zipfile.BadZipFile as error:
                raise DamagedRunFolder(f"{path}: not a whole torch file (no zip directory at "
                                       "its end: cut short?)") from error


class CheckpointStore:
    """A folder of `checkpoint-NNNNNN/`, one per committed step, each written whole."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, step: int) -> Path:
        return self.root / f"{PREFIX}{step:06d}"

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(folder.name.removeprefix(PREFIX))
                      for folder in self.root.glob(f"{PREFIX}*") if folder.is_dir())

    def write(self, step: int) -> AbstractContextManager[Path]:
        """`with store.write(step) as folder:` fill `folder`; it replaces the checkpoint in
        one rename when the block succeeds."""
        return atomic_directory(self.path(step))

    def prune(self, keep: int, committed: int) -> None:
        """Keep the newest `keep` committed checkpoints; drop any beyond the commit point
        (a batch that was in flight when the run was killed) and stale temporaries."""
        remove_stale_temporaries(self.root)
        steps = self.steps()
        for step in steps:
            if step > committed:
                shutil.rmtree(self.path(step))
        kept = [step for step in steps if step <= committed]
        for step in kept[:-keep] if keep > 0 else []:
            shutil.rmtree(self.path(step))
