"""Atomic file writes, an append-only jsonl log that can be cut back to a commit point,
reading back a JSON file a run wrote, and telling a failed write's cause (a full disk, a
read-only folder) from other failures."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


class DamagedRunFolder(ValueError):
    """A file of a run folder is missing, empty or not what the run wrote there (or a log
    holds less than its commit point committed); the message names the file, the problem
    and what to do."""


def read_json(path: Path) -> Any:
    """The JSON value a run wrote to `path`; DamagedRunFolder naming the file when it is
    empty (a copy cut short: every write here is atomic) or not JSON."""
    data = path.read_bytes()
    if not data:
        raise DamagedRunFolder(f"{path}: empty (0 bytes)")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise DamagedRunFolder(f"{path}: not JSON (not UTF-8 text at byte {error.start})"
                               ) from error
    except json.JSONDecodeError as error:
        raise DamagedRunFolder(f"{path}: not JSON ({error.msg} at line {error.lineno} "
                               f"column {error.colno})") from error


@contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """Yield a fresh temp folder; on success it replaces `path` in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield temp
        if path.exists():
            shutil.rmtree(path)
        os.replace(temp, path)
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True)


# How atomic_write_text and atomic_directory name their temporaries: ".<target>." with
# tempfile's 8 random characters, then ".tmp".
_TEMPORARY = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")


def temporary_target(name: str) -> str | None:
    """The name of the file or folder an atomic write was making, where `name` is one of
    its temporaries; None for any other name."""
    match = _TEMPORARY.fullmatch(name)
    return match.group(1) if match else None


def remove_stale_temporaries(folder: Path) -> None:
    """Drop temp files and folders left by a process killed mid-write: only those named
    as the atomic writes here name them (any other file, `.notes.tmp` too, is kept)."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if temporary_target(entry.name) is None:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


class JsonlLog:
    """An append-only jsonl file. `size` is the commit point a resumed run cuts back to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def truncate(self, size: int) -> None:
        """Cut the log back to `size` bytes. A log already shorter has lost committed rows:
        truncating "back" would pad it with NUL bytes that later appends sit behind."""
        if size > self.size:
            raise ValueError(f"{self.path} holds {self.size} bytes, fewer than the {size} "
                             "to cut it back to: committed rows are missing")
        with self.path.open("r+b") as stream:
            stream.truncate(size)

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())

    def read(self) -> list[dict[str, Any]]:
        with self.path.open(encoding="utf-8") as stream:
            return [json.loads(line) for line in stream if line.strip()]


def read_numbered_json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number from 1, parsed row) for each non-blank line of a jsonl file; a line that
    is not JSON raises ValueError naming the file, the line and the column."""
    rows = []
    with path.open(encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: invalid JSON: {error.msg} "
                                 f"(column {error.colno})") from error
    return rows


def read_validated_json_lines(path: Path, model: type[ModelT]) -> list[tuple[int, ModelT]]:
    """(line number, row) for each non-blank line of a jsonl file of `model` rows; a
    missing file, a line that is not JSON or a row that does not validate raises
    ValueError naming the file, the line and the key."""
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    rows = []
    for number, row in read_numbered_json_lines(path):
        try:
            rows.append((number, model.model_validate(row)))
        except ValidationError as error:
            first = error.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"{path}:{number}: key '{key}': {first['msg']}") from error
    return rows


# Errors that say the storage, not the program, refused a write.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS,
                            errno.EACCES, errno.EPERM})
PROBE_BYTES = 1 << 20


def storage_os_error(error: BaseException, folder: Path) -> OSError | None:
    """The OSError behind `error` (itself, or what it was raised from) in which storage
    refused a write under `folder`, if any; a file elsewhere (say an unreadable model) is
    not the folder's failure."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if (isinstance(current, OSError) and current.errno in STORAGE_ERRNOS
                and (current.filename is None
                     or Path(os.fsdecode(current.filename)).resolve().is_relative_to(
                         folder.resolve()))):
            return current
        current = current.__cause__ or current.__context__
    return None


def probe_writable(folder: Path) -> OSError | None:
    """Write, fsync and remove a 1 MiB file in `folder` (or its nearest existing parent).
    Libraries that wrap a failed write in their own error (torch.save says "file write
    failed") hide the cause; a disk that is full or read-only fails this probe too."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        handle, name = tempfile.mkstemp(dir=existing, prefix=".write-probe.", suffix=".tmp")
    except OSError as error:
        return error if error.errno in STORAGE_ERRNOS else None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(bytes(PROBE_BYTES))
            stream.flush()
            os.fsync(stream.fileno())
    except OSError as error:
        return error if error.errno in STORAGE_ERRNOS else None
    finally:
        Path(name).unlink(missing_ok=True)
    return None
