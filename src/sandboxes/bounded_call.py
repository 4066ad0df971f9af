"""Code run on untrusted input (a scorer on a model's reply), bounded in time, callable
from any process or thread.

A scorer can compute for ever on a short reply: sympy on `9**9**9**9` is one C call, and
a pure-Python loop holds its thread; neither can be stopped from inside the process
(SIGALRM works only in a process's main thread, and never inside one C call; a thread
cannot be killed). So a bounded call runs in a worker process that is killed and
replaced when it overruns; the caller gets `BoundExceeded`, an outcome to score, and
nothing is left running.

The worker is a fresh interpreter (`python -c`, pickles over pipes), not a
multiprocessing child: spawn and forkserver children re-run the caller's main script,
so a script without a main-module guard would score its answers again inside the
worker and break it; and a fork of a process holding torch and Ray threads is not safe.
A process forked from the caller (`os.fork`, a multiprocessing fork pool) lets go of its
parent's worker at the fork and starts its own when it first makes a bounded call.

A function crosses as a pickle, by reference: a module-level def, or an object of a
module-level class (whose `__setstate__` may set itself up there, such as drawing its
datasets). Each is sent once per worker and loaded there under the generous start bound,
with an optional first call (`warm_up`: a library that sets itself up on its first
call), so that the bound of a call measures the call alone. A bounded call made inside
the worker (a scorer that calls another bounded function) runs in place, under the bound
of the call that is running.

The worker process itself (its loop, its memory bound, its isolation under bubblewrap) is
src/sandboxes/scorer_worker.py.

A worker that cannot start or load a function is the host's failure, not the reply's:
`ScorerUnavailable`, which the callers let through (the episode is a task error, never
a reward of 0).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any

from src.sandboxes import scorer_worker
from src.sandboxes.scorer_worker import START_TIMEOUT_S, ScorerUnavailable, WorkerProcess

# A scorer's bound: math-verify's since it was first bounded; a call settled later is an
# overrun (scored 0).
SCORER_TIMEOUT_S = 5.0


class BoundExceeded(TimeoutError):
    """A bounded call ran past its bound, or its worker process ended during it (killed
    for memory, say: no more settled than an overrun). The worker has been replaced."""

    def __init__(self, name: str, timeout_s: float, exit_code: int | None = None) -> None:
        why = (f"ran past {timeout_s:g} s" if exit_code is None
               else f"its worker process ended (exit code {exit_code})")
        super().__init__(f"{name} {why}")
        self.timeout_s = timeout_s
        self.exit_code = exit_code


class BoundedFunction:
    """`function` called in the worker process, each call bounded in time.

    `warm_up`: the arguments of a first call made when the function is loaded into a
    worker (not bounded by a call's bound). `read_paths`: host files or folders the
    function reads in the worker beyond the module search path (a file it loads by path);
    the worker sees them read-only (one started before is replaced). Raises ValueError at
    once for a function that cannot cross to the worker (a local def, a lambda)."""

    def __init__(self, function: Callable[..., Any], warm_up: tuple[Any, ...] | None = None,
                 read_paths: Sequence[str] = ()) -> None:
        self.function = function
        self.name = getattr(function, "__name__", type(function).__name__)
        self.read_paths = frozenset(os.path.realpath(path) for path in read_paths)
        try:
            self._pickled = pickle.dumps((function, warm_up), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise ValueError(
                f"'{self.name}' cannot be sent to the process where it runs bounded in "
                f"time ({error}): define it at module level (a def, or an object of a "
                "module-level class)") from error
        self.key = hashlib.sha256(self._pickled).hexdigest()

    def __call__(self, *args: Any, timeout_s: float = SCORER_TIMEOUT_S, **kwargs: Any) -> Any:
        """The function's value; its exception, raised again here; BoundExceeded past
        `timeout_s`."""
        if scorer_worker.IN_WORKER:
            return self.function(*args, **kwargs)
        return _CALLER.call(self, args, kwargs, timeout_s)

    def start(self) -> None:
        """Load the function into the worker now (starting it), and into every worker that
        replaces it, so that no call is charged with loading it."""
        _CALLER.start(self)

    @property
    def payload(self) -> bytes:
        return self._pickled


class _Caller:
    """One worker process per Python process, started on first use; calls from several
    threads take turns."""

    def __init__(self) -> None:
        self._worker: WorkerProcess | None = None
        self._lock = threading.Lock()
        self._started: dict[str, BoundedFunction] = {}  # loaded into every new worker
        self._read_paths: frozenset[str] = frozenset()  # every worker sees them

    def call(self, function: BoundedFunction, args: tuple[Any, ...], kwargs: dict[str, Any],
             timeout_s: float) -> Any:
        with self._lock:
            worker = self._ready(function)
            reply = worker.ask(("call", function.key, (args, kwargs)), timeout_s)
            if reply is None:
                self._worker = None
                code = worker.stop()
                raise BoundExceeded(function.name, timeout_s, code if worker.ended else None)
        return _result(reply)

    def start(self, function: BoundedFunction) -> None:
        with self._lock:
            self._started[function.key] = function
            self._ready(function)

    def _ready(self, function: BoundedFunction) -> WorkerProcess:
        """The worker, started where there is none, with `function` (and every started
        one) loaded. Holding the lock."""
        if not function.read_paths <= self._read_paths:
            self._read_paths |= function.read_paths
            if self._worker is not None:  # its mounts are made: a new one sees the paths
                self._worker.stop()
                self._worker = None
        if self._worker is None:
            self._worker = WorkerProcess(sorted(self._read_paths))
        for needed in (*self._started.values(), function):
            if needed.key not in self._worker.loaded:
                self._load(self._worker, needed)
        return self._worker

    def _load(self, worker: WorkerProcess, function: BoundedFunction) -> None:
        reply = worker.ask(("load", function.key, function.payload), START_TIMEOUT_S)
        if reply is None:
            self._worker = None
            code = worker.stop()
            raise ScorerUnavailable(f"the bounded-call worker could not load '{function.name}': "
                               + (f"it exited with code {code}" if worker.ended
                                  else f"not loaded after {START_TIMEOUT_S:.0f} s"))
        try:
            _result(reply)
        except Exception as error:
            raise ScorerUnavailable(f"the bounded-call worker could not load '{function.name}' "
                               f"(is it importable there, not defined in a script's "
                               f"__main__?): {type(error).__name__}: {error}") from error
        worker.loaded.add(function.key)

    def forget_after_fork(self) -> None:
        """In a forked child: the worker and the lock are the parent's (the lock may be
        held by one of the parent's threads, which the child does not have)."""
        self._lock = threading.Lock()
        if self._worker is not None:
            self._worker.let_go()
            self._worker = None

    def stop(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    @property
    def worker_pid(self) -> int | None:
        return None if self._worker is None else self._worker.pid


def _result(reply: tuple[str, Any]) -> Any:
    kind, payload = reply
    if kind == "value":
        return payload
    pickled, text, worker_traceback = payload
    error = pickle.loads(pickled) if pickled is not None else RuntimeError(text)
    error.add_note(f"raised in the bounded-call worker process:\n{worker_traceback}")
    raise error


_CALLER = _Caller()
os.register_at_fork(after_in_child=_CALLER.forget_after_fork)
atexit.register(_CALLER.stop)


def stop_worker() -> None:
    """Stop this process's worker (the next bounded call starts another)."""
    _CALLER.stop()


def worker_pid() -> int | None:
    """The process id of this process's worker, None before its first call (for tests
    that check a killed worker is gone)."""
    return _CALLER.worker_pid
