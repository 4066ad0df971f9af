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

Memory: a call may grow the worker's address space by `SCORER_MEMORY_BYTES` at most (a
reply such as `len('x'*10**9)` asks a scorer that evaluates it for a gigabyte): past it
the allocation fails, and the call raises MemoryError, an error the caller scores.

What the worker does not promise: isolation. It runs as the caller's user with the
caller's files and network, so a scorer that evaluates the reply as Python (sympy's
`parse_expr` does) runs the model's code there; such scorers belong in an OS sandbox
(src/sandboxes/).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import pickle
import resource
import select
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

# A scorer's bound: math-verify's since it was first bounded; a call settled later is an
# overrun (scored 0).
SCORER_TIMEOUT_S = 5.0
START_TIMEOUT_S = 120.0  # a worker imports what the functions need: seconds on a loaded machine
# The address space one call may add to the worker's (RLIMIT_AS, set before each call).
SCORER_MEMORY_BYTES = 512 * 2**20
_LENGTH = struct.Struct("!Q")
_READY = "ready"
# The worker sees the caller's sys.path, so it imports this module wherever that lives.
_WORKER_CODE = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
                f"from {__name__} import serve; serve()")
_IN_WORKER = False  # set in the worker: calls made there run in place


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
    worker (not bounded by a call's bound). Raises ValueError at once for a function that
    cannot cross to the worker (a local def, a lambda)."""

    def __init__(self, function: Callable[..., Any], warm_up: tuple[Any, ...] | None = None
                 ) -> None:
        self.function = function
        self.name = getattr(function, "__name__", type(function).__name__)
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
        if _IN_WORKER:
            return self.function(*args, **kwargs)
        return _CALLER.call(self, args, kwargs, timeout_s)

    def start(self) -> None:
        """Load the function into the worker now (starting it), and into every worker that
        replaces it, so that no call is charged with loading it."""
        _CALLER.start(self)

    @property
    def payload(self) -> bytes:
        return self._pickled


def _raised(error: BaseException) -> tuple[str, Any]:
    """An exception as the caller raises it again: itself where it pickles, else its text."""
    text = "".join(traceback.format_exception(error))
    try:
        pickled = pickle.dumps(error)
        pickle.loads(pickled)
    except Exception:
        pickled = None
    return ("raised", (pickled, f"{type(error).__name__}: {error}", text))


def serve() -> None:
    """The worker's loop: a pickled request in, a pickled reply out, until its input ends
    (the caller is gone)."""
    global _IN_WORKER
    _IN_WORKER = True
    # The caller's Ctrl-C is the caller's to handle; it ends this worker when it exits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Replies get the real stdout; anything printed during a call goes to stderr.
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    os.dup2(2, 1)
    functions: dict[str, Callable[..., Any]] = {}
    _send(replies, _READY)
    while (request := _receive(requests)) is not None:
        kind, key, payload = request
        try:
            if kind == "load":
                function, warm_up = pickle.loads(payload)
                if warm_up is not None:
                    function(*warm_up)
                functions[key] = function
                reply = ("value", None)
            else:
                args, kwargs = payload
                _bound_memory_growth(SCORER_MEMORY_BYTES)
                reply = ("value", functions[key](*args, **kwargs))
            _send(replies, reply)
        except Exception as error:  # the caller raises it; this worker carries on
            _send(replies, _raised(error))


def _bound_memory_growth(extra: int) -> None:
    """Let the process's address space grow by `extra` bytes from its size now."""
    with open("/proc/self/statm", "rb") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    soft = size + extra
    resource.setrlimit(resource.RLIMIT_AS,
                       (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _send(stream: Any, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)


def _receive(stream: Any) -> Any:
    header = _read_exactly(stream, _LENGTH.size)
    if header is None:
        return None
    return pickle.loads(_read_exactly(stream, _LENGTH.unpack(header)[0]) or b"")


def _read_exactly(stream: Any, size: int) -> bytes | None:
    data = bytearray()  # grown in place: a long request comes in many pipe-sized chunks
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class _Worker:
    """One worker process, started and ready when constructed, and the pipes to it.
    Spawned by hand rather than with subprocess.Popen: a forked child must let go of
    its parent's worker without waiting for it, which Popen would warn about."""

    def __init__(self) -> None:
        worker_input, self._input = os.pipe()
        self._output, worker_output = os.pipe()
        try:
            self.pid = os.posix_spawn(
                sys.executable, [sys.executable, "-c", _WORKER_CODE, json.dumps(sys.path)],
                os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, worker_input, 0),
                                          (os.POSIX_SPAWN_DUP2, worker_output, 1)])
        except OSError:
            self.let_go()
            raise
        finally:
            os.close(worker_input)
            os.close(worker_output)
        self._exit_code: int | None = None
        self.ended = False  # it closed its output: it is exiting, on its own
        # grown in place: joining bytes would copy all read so far for each pipe-sized
        # chunk, seconds for a reply of tens of megabytes
        self._unread = bytearray()
        self.loaded: set[str] = set()
        if self.read(START_TIMEOUT_S) != _READY:
            code = self.stop()
            raise RuntimeError(
                "the bounded-call worker process did not start: "
                + (f"it exited with code {code} (its error is printed above)" if self.ended
                   else f"not ready after {START_TIMEOUT_S:.0f} s"))

    def ask(self, request: tuple[str, str, Any], timeout_s: float) -> Any:
        """The worker's reply, or None when none came within `timeout_s` or it ended."""
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        data = memoryview(_LENGTH.pack(len(data)) + data)  # sliced without copies
        try:
            while data:  # a pipe may take part of a long request at a time
                data = data[os.write(self._input, data):]
        except BrokenPipeError:  # its input is closed: it is exiting
            self.ended = True
            return None
        return self.read(timeout_s)

    def read(self, timeout_s: float) -> Any:
        poller = select.poll()
        poller.register(self._output, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while True:
            if len(self._unread) >= _LENGTH.size:
                size = _LENGTH.size + _LENGTH.unpack_from(self._unread)[0]
                if len(self._unread) >= size:
                    message = self._unread[_LENGTH.size:size]
                    del self._unread[:size]
                    return pickle.loads(message)
            left_s = deadline - time.monotonic()
            if left_s <= 0 or not poller.poll(left_s * 1000):
                return None
            chunk = os.read(self._output, 1 << 16)
            if not chunk:
                self.ended = True
                return None
            self._unread += chunk

    def stop(self) -> int:
        """Kill the worker unless it is ending on its own; its exit code (negative: the
        signal that ended it)."""
        if self._exit_code is None:
            if not self.ended:
                os.kill(self.pid, signal.SIGKILL)
            self._exit_code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        self.let_go()
        return self._exit_code

    def let_go(self) -> None:
        """Close this process's ends of the pipes (once: a descriptor's number is reused),
        leaving the worker itself alone."""
        for descriptor in (self._input, self._output):
            if descriptor >= 0:
                os.close(descriptor)
        self._input = self._output = -1


class _Caller:
    """One worker process per Python process, started on first use; calls from several
    threads take turns."""

    def __init__(self) -> None:
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        self._started: dict[str, BoundedFunction] = {}  # loaded into every new worker

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

    def _ready(self, function: BoundedFunction) -> _Worker:
        """The worker, started where there is none, with `function` (and every started
        one) loaded. Holding the lock."""
        if self._worker is None:
            self._worker = _Worker()
        for needed in (*self._started.values(), function):
            if needed.key not in self._worker.loaded:
                self._load(self._worker, needed)
        return self._worker

    def _load(self, worker: _Worker, function: BoundedFunction) -> None:
        reply = worker.ask(("load", function.key, function.payload), START_TIMEOUT_S)
        if reply is None:
            self._worker = None
            code = worker.stop()
            raise RuntimeError(f"the bounded-call worker could not load '{function.name}': "
                               + (f"it exited with code {code}" if worker.ended
                                  else f"not loaded after {START_TIMEOUT_S:.0f} s"))
        try:
            _result(reply)
        except Exception as error:
            raise RuntimeError(f"the bounded-call worker could not load '{function.name}' "
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


def worker_pid() -> int | None:
    """The process id of this process's worker, None before its first call (for tests
    that check a killed worker is gone)."""
    return _CALLER.worker_pid
