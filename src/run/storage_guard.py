"""The storage guard: a write into the run folder that the storage refused (no space, no
permission) becomes a StorageFailure that says what the run had committed and how to
resume."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from src.configuration.errors import ConfigError
from src.run.folder import RunDirectory
from src.storage.files import DamagedRunFolder, probe_writable, storage_os_error
from src.storage.run_layout import STATE_FILE
from src.storage.run_lock import RunFolderInUse


class StorageFailure(Exception):
    """A write into the run folder failed for want of space or permission. What the run had
    committed is untouched; the message says where it stands and how to resume."""


def _describe_storage_failure(folder: Path, cause: OSError) -> str:
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free_mib = shutil.disk_usage(existing).free / (1 << 20)
    where = cause.filename or existing
    state = RunDirectory(folder).read_state() if (folder / STATE_FILE).is_file() else None
    if state is None:
        committed = "nothing had been committed yet"
    else:
        committed = (f"the last committed state is kept ({folder / STATE_FILE}: "
                     f"completed_batches {state.completed_batches})")
    return (f"cannot write {where}: {cause.strerror} ({free_mib:.1f} MiB free on its file "
            f"system); {committed}. Free space or make the folder writable, then run the "
            "same command again to resume.")


@contextmanager
def storage_guard(folder: Path) -> Iterator[None]:
    """Turn a failed write into `StorageFailure` when the storage refused it: an OSError
    such as ENOSPC or EROFS behind the error, or (when a library hid the cause) a folder
    that fails a write probe. Any other error passes through unchanged."""
    try:
        yield
    except (StorageFailure, ConfigError, DamagedRunFolder, RunFolderInUse):
        raise  # a refusal, not a failed write: nothing to probe
    except Exception as error:
        cause = storage_os_error(error, folder) or probe_writable(folder)
        if cause is None:
            raise
        raise StorageFailure(_describe_storage_failure(folder, cause)) from error
