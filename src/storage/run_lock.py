"""One process at a time in a run folder: the process that trains a run holds a lock on
the folder's `.run.lock` until it ends, and a second process (the same command started
again while the first still runs, a scheduler's retry beside a job that is not dead yet)
is refused before it writes anything, instead of both appending to the same logs.

The lock is `flock` on a descriptor opened read-only (one open for writing would keep the
file system from being remounted read-only under a running run) and closed on exec: the
kernel releases it when the holder dies, SIGKILL included, so a killed run resumes at
once, and the processes a run starts (scoring workers, sandboxes, Ray) do not hold it. A
process forked without exec would; the project forks none. A file system that takes no
such locks (some network file systems) leaves the folder unlocked, with a warning. The
lock holds between processes only: a second hold in the same process shares it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
from pathlib import Path

from src.storage.run_layout import LOCK_FILE

logger = logging.getLogger(__name__)


class RunFolderInUse(RuntimeError):
    """Another live process trains the run in this folder."""


class RunLock:
    """The lock on a run folder, held by this process while the object lives (or until
    `release`). Holds within one process share the lock (flock would refuse a second
    opening of the file), which goes with the last of them."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._key: Path | None = None  # set while this object holds the lock
        with _HELD_LOCK:
            key = self.path.resolve()
            if key in _HELD:
                _HELD[key][1] += 1
                self._key = key
                return
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(fd)
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    logger.warning("%s cannot be locked (%s): this file system takes no "
                                   "locks, so nothing stops a second process from training "
                                   "the run in %s at once", self.path, error, folder)
                    return
                raise RunFolderInUse(
                    f"{folder} is in use: another process is training this run (it holds "
                    f"the lock on {self.path}; `fuser {self.path}` names it). Wait for it "
                    "to end, stop it, or start a new run (--new_run with {TIMESTAMP} in "
                    "output_dir, or another output_dir).") from error
            _HELD[key] = [fd, 1]
            self._key = key

    def release(self) -> None:
        with _HELD_LOCK:
            if self._key is None:
                return
            held = _HELD[self._key]
            held[1] -= 1
            if held[1] == 0:
                os.close(held[0])  # the lock goes with the descriptor
                del _HELD[self._key]
            self._key = None

    def __del__(self) -> None:
        # at interpreter exit this module's globals may be gone first: the process's end
        # releases the lock anyway
        with contextlib.suppress(AttributeError, TypeError):
            self.release()


# this process's locks: the lock file's resolved path -> [its descriptor, the holds]
_HELD: dict[Path, list[int]] = {}
_HELD_LOCK = threading.Lock()
