"""A daemon thread that runs the functions handed to it, one at a time, in order."""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class CallAbandoned(BaseException):
    """Raised inside a worker thread whose caller gave up on the call it runs (a
    BaseException, so that the environment's own `except Exception` does not swallow it)."""


class WorkerThread:
    """Runs submitted functions in one thread and hands each result (or exception) back as
    a Future. A daemon thread, not an executor's: executors join their threads at exit,
    and neither a call that never returns (a thread cannot be killed) nor work still in
    flight when the run stops may hold up the process's exit."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """The thread has not ended: a call still runs or more may come (before `stop`)."""
        return self._thread.is_alive()

    def _serve(self) -> None:
        try:
            while (item := self._calls.get()) is not None:
                function, future = item
                try:
                    future.set_result(function())
                except BaseException as error:  # handed to the caller, which decides
                    future.set_exception(error)
                    if isinstance(error, CallAbandoned):
                        return
        except CallAbandoned:  # arrived between calls: the thread is given up all the same
            return

    def interrupt(self) -> None:
        """Stop the call the thread runs, which its caller gave up on: CallAbandoned is
        raised in the thread at its next Python bytecode, and the thread ends. A thread
        cannot be killed, but one spinning in Python would otherwise keep a share of the
        interpreter from every other episode; a call blocked inside C code (a sleep, I/O, a
        long arithmetic operation) stops only once that returns."""
        ident = self._thread.ident
        if ident is not None and self._thread.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                                       ctypes.py_object(CallAbandoned))

    def submit(self, function: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._calls.put((function, future))
        return future

    def stop(self) -> None:
        """End the thread once the calls already submitted have run."""
        self._calls.put(None)
