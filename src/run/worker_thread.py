"""A daemon thread that runs the functions handed to it, one at a time, in order."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerThread:
    """Runs submitted functions in one thread and hands each result (or exception) back as
    a Future. A daemon thread, not an executor's: executors join their threads at exit,
    and neither a call that never returns (a thread cannot be killed) nor work still in
    flight when the run stops may hold up the process's exit."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue())
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            function, future = item
            try:
                future.set_result(function())
            except BaseException as error:  # handed to the caller, which decides
                future.set_exception(error)

    def submit(self, function: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._calls.put((function, future))
        return future

    def stop(self) -> None:
        """End the thread once the calls already submitted have run."""
        self._calls.put(None)
