"""The checkpoint store of every stateful part of a run (a trainer, a task family, an
agent): a folder of `checkpoint-NNNNNN/` (NNNNNN: the steps committed), each written by
its owner into a fresh folder and renamed into place whole, and `best/`, a copy of the
best one's adapter. What a checkpoint holds is its owner's (a trainer's:
src.training.training_state); which one is best, the run protocol's (src.run.protocol).

Every checkpoint (and best/) holds `checksums.json`, the sha256 of each of its files,
written last before the rename. `check_checkpoint` tells a damaged checkpoint (a file
emptied, cut short or overwritten in the middle by a copy, a full disk outside the run, an
edit) before anything loads from it; a checkpoint written before checksums were kept is
checked by its files' headers alone. A store's checkpoints are folders the run wrote: a
symbolic link among them is refused, never followed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from src.storage.files import (
    DamagedRunFolder,
    atomic_directory,
    atomic_write_json,
    read_json,
    remove_stale_temporaries,
)

PREFIX = "checkpoint-"
BEST = "best"  # a store's best/: the best checkpoint's adapter, training_step.json, best.json
BEST_MARK = "best.json"  # in a checkpoint: marked best; in best/: which step it holds
CHECKSUMS = "checksums.json"  # {"sha256": {path in the folder: digest}}, written last
HASHED_BYTES = 1 << 20  # read and hashed at a time


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(HASHED_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def write_checksums(folder: Path, copied: Mapping[str, str] | None = None) -> None:
    """Write `folder`'s checksums.json: every file's sha256 by its path in `folder`.
    `copied`: the recorded digests of files copied from another checkpoint, taken as they
    are rather than hashed again, so that a damaged file copied stays told from what the
    run wrote."""
    known = copied or {}
    digests = {name: known.get(name) or sha256_of(folder / name) for name in _files(folder)
               if name != CHECKSUMS}
    atomic_write_json(folder / CHECKSUMS, {"sha256": digests})


def read_checksums(folder: Path) -> dict[str, str] | None:
    """The digests `folder`'s checksums.json records, by path; None for a checkpoint
    written before they were kept (it has none)."""
    path = folder / CHECKSUMS
    if not path.is_file():
        return None
    record = read_json(path)
    digests = record.get("sha256") if isinstance(record, dict) else None
    if not isinstance(digests, dict) or not all(
            isinstance(name, str) and isinstance(digest, str) and _inside(name)
            for name, digest in digests.items()):
        raise DamagedRunFolder(f"{path}: not the checksums a run writes (a mapping "
                               "'sha256' of file paths inside the folder to digests)")
    return digests


def check_checkpoint(folder: Path, within: str | None = None) -> None:
    """DamagedRunFolder naming the first file of checkpoint (or best/) `folder`, or of its
    subfolder `within` (an adapter), that cannot be what the run wrote: a symbolic link,
    empty, a JSON file that is not JSON, a safetensors file whose header does not cover
    its length, a torch file that is not a whole zip archive (a file cut short loses the
    archive's directory, which is at its end), or a file whose sha256 is not the one its
    checksums.json recorded (damage in the middle, which headers do not show). Nothing is
    unpickled and no tensor is built, so this runs before any model loads."""
    checked = folder / within if within else folder
    refuse_links(checked)
    if not checked.is_dir():
        raise DamagedRunFolder(f"{checked}: missing")
    for path in sorted(checked.rglob("*")):
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
    digests = read_checksums(folder) or {}
    for name, digest in sorted(digests.items()):
        if within and not name.startswith(f"{within}/"):
            continue
        path = folder / name
        if not path.is_file():
            raise DamagedRunFolder(f"{path}: missing, but {folder / CHECKSUMS} lists it")
        if sha256_of(path) != digest:
            raise DamagedRunFolder(f"{path}: not the file the run wrote (its sha256 differs "
                                   f"from the one in {folder / CHECKSUMS}: changed or "
                                   "damaged since it was saved)")


def refuse_links(path: Path) -> None:
    """DamagedRunFolder where `path` or anything under it is a symbolic link: a run folder's
    checkpoints are folders the run wrote, and a link would be read through (into what it
    points to, perhaps outside the run) and could not be pruned."""
    for candidate in [path, *_tree(path)]:
        if candidate.is_symlink():
            raise DamagedRunFolder(
                f"{candidate}: a symbolic link (to {os.readlink(candidate)}), which the run "
                "never writes into a checkpoint; put a copy of what it points to in its "
                "place, or remove it")


def _tree(folder: Path) -> Iterator[Path]:
    """Everything under `folder`, links not followed."""
    if folder.is_dir() and not folder.is_symlink():
        for parent, folders, files in os.walk(folder):
            for name in [*folders, *files]:
                yield Path(parent) / name


def _files(folder: Path) -> list[str]:
    """The paths of `folder`'s files, relative to it, with '/' between parts."""
    return sorted(path.relative_to(folder).as_posix() for path in _tree(folder)
                  if path.is_file())


def _inside(name: str) -> bool:
    """Whether a recorded path stays inside its folder."""
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def marked_step(record: Any, path: Path) -> int:
    """The step a best record names (`epoch` in an offline run's); DamagedRunFolder naming
    `path` where it names none."""
    step = record.get("step", record.get("epoch")) if isinstance(record, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise DamagedRunFolder(f"{path}: names no committed step (a best record holds "
                               "'step' or 'epoch', a step from 1 on)")
    return step


class CheckpointStore:
    """A folder of `checkpoint-NNNNNN/`, one per committed step, each written whole."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, step: int) -> Path:
        return self.root / f"{PREFIX}{step:06d}"

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        folders = sorted(self.root.glob(f"{PREFIX}*"))
        for folder in folders:
            refuse_links(folder)
        return sorted(int(folder.name.removeprefix(PREFIX))
                      for folder in folders if folder.is_dir())

    @contextmanager
    def write(self, step: int) -> Iterator[Path]:
        """`with store.write(step) as folder:` fill `folder`; when the block succeeds its
        checksums are written and it replaces the checkpoint in one rename."""
        with atomic_directory(self.path(step)) as folder:
            yield folder
            write_checksums(folder)

    @property
    def best_mark(self) -> Path:
        return self.root / BEST / BEST_MARK

    def best_record(self) -> dict[str, Any] | None:
        """best/'s record (None where the store has no best/), checked to name a step."""
        refuse_links(self.root / BEST)
        if not self.best_mark.is_file():
            return None
        record = read_json(self.best_mark)
        marked_step(record, self.best_mark)
        return record

    def remove_best(self) -> None:
        """Drop best/, moved aside first so that a kill never leaves half of it."""
        if (self.root / BEST).is_dir():
            aside = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{BEST}.", suffix=".tmp"))
            os.replace(self.root / BEST, aside / BEST)
            shutil.rmtree(aside)

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
