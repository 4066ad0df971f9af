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
lock holds between processes only: a second hold in the same process succeeds.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

from src.storage.run_layout import LOCK_FILE

logger = logging.getLogger(__name__)


class RunFolderInUse(RuntimeError):
    """Another live process trains the run in this folder."""


class RunLock:
    """The lock on a run folder, held by this process while the object lives (or until
    `release`)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd: int | None = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC,
                                       0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            self.release()
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                logger.warning("%s cannot be locked (%s): this file system takes no locks, "
                               "so nothing stops a second process from training the run in "
                               "%s at once", self.path, error, folder)
                return
            raise RunFolderInUse(
                f"{folder} is in use: another process is training this run (it holds the "
                f"lock on {self.path}; `fuser {self.path}` names it). Wait for it to end, "
                "stop it, or start a new run (--new_run with {TIMESTAMP} in output_dir, "
                "or another output_dir).") from error

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes with the last descriptor of its opening
            self._fd = None

    def __del__(self) -> None:
        self.release()
