"""The bounded-call worker (src/sandboxes/bounded_call.py): the loop that runs in it
(`serve`) and the caller's handle on the process (`WorkerProcess`).

Memory: a call may grow the worker's address space by `SCORER_MEMORY_BYTES` at most (a
reply such as `len('x'*10**9)` asks a scorer that evaluates it for a gigabyte): past it
the allocation fails, and the call raises MemoryError, an error the caller scores. The
bound ends with the call: loading the next function is not made under it.

Isolation: some scorers evaluate the reply as Python (sympy's `parse_expr` does, under
reasoning-gym's Countdown, say), so the model's text runs in the worker. The worker
therefore runs under bubblewrap (src/sandboxes/backends.py `isolated_command`): no
network, no writable host file (a private /tmp of `SCORER_TMP_BYTES`), read-only only the
system's files, the interpreter's installation and the folders of the caller's `sys.path`
(where the scorers' modules are), its own pid namespace that dies with the caller, at
most `SCORER_MAX_PROCESSES` processes and threads, as an unprivileged user. It still
reads what those folders hold. On a host without user namespaces the worker cannot
start and every bounded call raises `ScorerUnavailable` saying so; only there, and only
for trusted replies, the environment variable `AGENT_RL_SCORER_SANDBOX=unsafe_process`
runs it as a plain process (nothing isolated, nothing falls back to it silently).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import resource
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from src.sandboxes.backends import isolated_command
from src.sandboxes.process import SPAWNER, child_pids
from src.sandboxes.supervisor.identity import leave_root

START_TIMEOUT_S = 120.0  # a worker imports what the functions need: seconds on a loaded machine
# The address space one call may add to the worker's (RLIMIT_AS, set before each call).
SCORER_MEMORY_BYTES = 512 * 2**20
SCORER_TMP_BYTES = 64 * 2**20  # the worker's private /tmp (its only writable place)
SCORER_MAX_PROCESSES = 64  # RLIMIT_NPROC in its user namespace: threads of numeric libraries
# the one way to run the worker without isolation (see the module docstring)
UNSAFE_VARIABLE = "AGENT_RL_SCORER_SANDBOX"
# what the worker's environment keeps of the caller's (no credentials, no host paths)
_KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONHASHSEED", "PYTHONWARNINGS",
                   "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                   "OPENBLAS_NUM_THREADS")
_LENGTH = struct.Struct("!Q")
_READY = "ready"
# The worker sees the caller's sys.path, so it imports this module wherever that lives.
_WORKER_CODE = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
                f"from {__name__} import serve; serve(sys.argv[2] == 'isolated')")
IN_WORKER = False  # set in the worker: bounded calls made there run in place


class ScorerUnavailable(RuntimeError):
    """The worker could not start, or could not load a function: the host's failure (no
    user namespaces, a function not importable there), never the reply's."""


def _raised(error: BaseException) -> tuple[str, Any]:
    """An exception as the caller raises it again: itself where it pickles, else its text."""
    text = "".join(traceback.format_exception(error))
    try:
        pickled = pickle.dumps(error)
        pickle.loads(pickled)
    except Exception:
        pickled = None
    return ("raised", (pickled, f"{type(error).__name__}: {error}", text))


def serve(isolated: bool) -> None:
    """The worker's loop: a pickled request in, a pickled reply out, until its input ends
    (the caller is gone)."""
    global IN_WORKER
    IN_WORKER = True
    if isolated:
        if os.getuid() == 0:  # a root host's launch: see isolated_command
            leave_root()
        resource.setrlimit(resource.RLIMIT_NPROC, (SCORER_MAX_PROCESSES,) * 2)
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
                with _memory_growth_bounded(SCORER_MEMORY_BYTES):
                    reply = ("value", functions[key](*args, **kwargs))
            _send(replies, reply)
        except Exception as error:  # the caller raises it; this worker carries on
            _send(replies, _raised(error))


@contextlib.contextmanager
def _memory_growth_bounded(extra: int) -> Iterator[None]:
    """Let the process's address space grow by `extra` bytes from its size now, until the
    block ends: the limit must not outlive the call, or loading the next function (its
    imports map libraries) would fail under the previous call's bound."""
    with open("/proc/self/statm", "rb") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    before = resource.getrlimit(resource.RLIMIT_AS)
    soft, hard = size + extra, before[1]
    resource.setrlimit(resource.RLIMIT_AS,
                       (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


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


class WorkerProcess:
    """One worker process, started and ready when constructed, and the pipes to it.
    Spawned by hand rather than with subprocess.Popen: a forked child must let go of
    its parent's worker without waiting for it, which Popen would warn about."""

    def __init__(self, read_paths: Sequence[str] = ()) -> None:
        worker_input, self._input = os.pipe()
        self._output, worker_output = os.pipe()
        argv = _worker_command(read_paths)
        try:
            # from the spawner's thread: bubblewrap's --die-with-parent is tied to the
            # thread that starts it, and a caller's thread may be short-lived
            self.pid = SPAWNER.run(lambda: os.posix_spawn(
                argv[0], argv, os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, worker_input, 0),
                              (os.POSIX_SPAWN_DUP2, worker_output, 1)]))
        except OSError as error:
            self.let_go()
            raise ScorerUnavailable(f"the bounded-call worker could not be started: "
                                    f"{error}") from error
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
            raise ScorerUnavailable(
                "the bounded-call worker process did not start: "
                + (f"it exited with code {code} (its error is printed above)" if self.ended
                   else f"not ready after {START_TIMEOUT_S:.0f} s")
                + (f". It runs under bubblewrap as another user: the folders of sys.path "
                   f"must be readable by other users, and the host must allow user "
                   f"namespaces; on a host without them, and only for trusted replies, set "
                   f"{UNSAFE_VARIABLE}=unsafe_process" if _isolated() else ""))

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
                # bubblewrap's child first: the init of the worker's pid namespace, whose
                # death ends every process there
                for pid in (*child_pids(self.pid), self.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
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


def _isolated() -> bool:
    choice = os.environ.get(UNSAFE_VARIABLE, "bubblewrap")
    if choice not in ("bubblewrap", "unsafe_process"):
        raise ScorerUnavailable(f"environment variable {UNSAFE_VARIABLE}={choice!r}: give "
                                f"bubblewrap (the default) or unsafe_process")
    return choice == "bubblewrap"


def _worker_command(read_paths: Sequence[str]) -> list[str]:
    """The worker's command line: the caller's module search path (absolute, as the
    worker's working directory is another) and the worker code, under bubblewrap unless
    the environment says otherwise, seeing that path and `read_paths` read-only."""
    search_path = [os.path.realpath(entry or os.getcwd()) for entry in sys.path]
    if not _isolated():
        return [sys.executable, "-c", _WORKER_CODE, json.dumps(search_path), "unsafe"]
    env = {name: os.environ[name] for name in _KEPT_VARIABLES if name in os.environ}
    return isolated_command(
        [sys.executable, "-c", _WORKER_CODE, json.dumps(search_path), "isolated"],
        [path for path in dict.fromkeys([*search_path, *read_paths])
         if os.path.exists(path)],
        SCORER_TMP_BYTES, env)
