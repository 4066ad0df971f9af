"""A pool of warm sandboxes, so that a batch of episodes does not wait for start-ups.

`SandboxPool(backend, size, parallelism)` opens `size` sandboxes ahead, `parallelism` at a
time, in its own threads; `acquire(files)` hands out a warm one (seeded with `files`), or
opens one if none is ready, and starts opening its replacement. A sandbox is used by one
episode only: the episode closes it (`with pool.acquire(files) as sandbox:`), never gives
it back. `close()` closes the warm ones and every one it handed out that is still open,
also one whose episode was dropped without closing it: the pool holds every handed-out
sandbox until it is closed (let go at the next `acquire`); the pool is a context manager,
so an error or Ctrl-C in the `with` block closes all. A
run killed outright (SIGKILL) takes its sandboxes with it (bubblewrap's
--die-with-parent).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

from src.sandboxes.contract import Files, Sandbox, SandboxBackend, SandboxUnavailable


class SandboxPool:
    def __init__(self, backend: SandboxBackend, size: int, parallelism: int = 8) -> None:
        if size < 0 or parallelism < 1:
            raise ValueError(f"sandbox pool: size must be >= 0 and parallelism >= 1, got "
                             f"size={size}, parallelism={parallelism}")
        self.backend = backend
        self.size = size
        self._executor = ThreadPoolExecutor(max_workers=parallelism,
                                            thread_name_prefix="sandbox-pool")
        self._lock = threading.Lock()
        self._warm: list[Future] = []
        self._handed_out: set[Sandbox] = set()  # until closed (by its episode or close())
        self._closed = False
        for _ in range(size):
            self._warm.append(self._executor.submit(backend.open))

    def acquire(self, files: Files | None = None) -> Sandbox:
        """A started sandbox holding `files`; raises `SandboxUnavailable` when none can
        be opened (a failed warm one is replaced by a fresh attempt first)."""
        with self._lock:
            if self._closed:
                raise ValueError("sandbox pool is closed")
            self._handed_out = {sandbox for sandbox in self._handed_out if not sandbox.closed}
            ready = next((future for future in self._warm if future.done()), None)
            future = ready or (self._warm[0] if self._warm else None)
            if future is not None:
                self._warm.remove(future)
                self._warm.append(self._executor.submit(self.backend.open))
        try:
            sandbox = future.result() if future is not None else self.backend.open()
        except SandboxUnavailable:
            sandbox = self.backend.open()  # a warm one failed to start: one more try
        if not sandbox.alive:
            sandbox.close()
            sandbox = self.backend.open()
        with self._lock:
            self._handed_out.add(sandbox)
        try:
            for path, data in (files or {}).items():
                sandbox.write_file(path, data)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def close(self) -> None:
        """Close every warm sandbox (those still starting once they have started) and
        every handed-out one still open. Idempotent."""
        with self._lock:
            self._closed = True
            warm, self._warm = self._warm, []
            handed_out = list(self._handed_out)
        for future in warm:
            future.cancel()  # not started yet: never will
            future.add_done_callback(_close_opened)
        for sandbox in handed_out:
            sandbox.close()
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def _close_opened(future: Future) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()
