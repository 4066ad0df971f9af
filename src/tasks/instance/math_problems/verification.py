"""math-verify on untrusted answers, bounded in time, callable from any process or thread.

math-verify enforces its own timeouts with SIGALRM, which works only in a process's main
thread (not in thread pools or Ray actors), and sympy can compute for ever on a reply such
as `\\boxed{9^{9^{9}}}`. So the check runs in a worker process that is killed and replaced
when it overruns; the answer then counts as wrong.

The worker is a fresh interpreter (`python -c`, JSON lines over pipes), not a
multiprocessing child: spawn and forkserver children re-run the caller's main script,
so a script without a main-module guard would score its answers again
inside the worker and break it; and a fork of a process holding torch and Ray threads is
not safe. A process forked from the caller (`os.fork`, a multiprocessing fork pool) lets
go of its parent's worker at the fork and starts its own when it first checks an answer.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import sys
import threading
import time
from typing import Any

from math_verify import parse, verify

logger = logging.getLogger(__name__)
# its timeouts are off (they run in our worker's main thread but we bound the whole call);
# the library warns on every call that they are
logging.getLogger("math_verify").setLevel(logging.ERROR)

VERIFY_TIMEOUT_S = 5.0
START_TIMEOUT_S = 120.0  # the worker imports sympy: seconds on a loaded machine
_READY = b"ready"
# The worker sees the caller's sys.path, so it imports this module wherever that lives.
_WORKER_CODE = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
                f"from {__name__} import serve; serve()")


def verify_boxed(gold: str, boxed: str) -> bool:
    """Whether the boxed answer equals the gold one. Gold goes first: verify is not
    symmetric. Unbounded: call it through `verify_bounded`."""
    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    predicted = parse(f"$\\boxed{{{boxed}}}$", parsing_timeout=None)
    if not gold_parsed or not predicted:
        return False
    return bool(verify(gold_parsed, predicted, timeout_seconds=None))


def serve() -> None:
    """The worker's loop: a JSON `[gold, boxed]` a line in, `{"correct": bool}` or
    `{"error": text}` a line out, until its input ends (the caller is gone)."""
    # The caller's Ctrl-C is the caller's to handle; it ends this worker when it exits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Replies get the real stdout; anything printed during a check goes to stderr.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    # math-verify's first call sets itself up (seconds on a loaded machine): done before
    # "ready", so that the first answer's time bound measures the check alone
    verify_boxed("1", "1")
    replies.write(_READY.decode() + "\n")
    for line in sys.stdin:
        gold, boxed = json.loads(line)
        try:
            reply: dict[str, Any] = {"correct": verify_boxed(gold, boxed)}
        except Exception as error:  # the caller raises it; this worker carries on
            reply = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps(reply) + "\n")


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
        self._unread = b""
        if self.read_line(START_TIMEOUT_S) != _READY:
            code = self.stop()
            raise RuntimeError(
                "math-verify's worker process did not start: "
                + (f"it exited with code {code} (its error is printed above)" if self.ended
                   else f"not ready after {START_TIMEOUT_S:.0f} s"))

    def ask(self, gold: str, boxed: str, timeout_s: float) -> dict[str, Any] | None:
        """The worker's reply, or None when none came within `timeout_s` or it ended."""
        data = (json.dumps([gold, boxed]) + "\n").encode()
        try:
            while data:  # a pipe may take part of a long answer at a time
                data = data[os.write(self._input, data):]
        except BrokenPipeError:  # its input is closed: it is exiting
            self.ended = True
            return None
        line = self.read_line(timeout_s)
        return None if line is None else json.loads(line)

    def read_line(self, timeout_s: float) -> bytes | None:
        poller = select.poll()
        poller.register(self._output, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._unread:
            left_s = deadline - time.monotonic()
            if left_s <= 0 or not poller.poll(left_s * 1000):
                return None
            chunk = os.read(self._output, 1 << 16)
            if not chunk:
                self.ended = True
                return None
            self._unread += chunk
        line, _, self._unread = self._unread.partition(b"\n")
        return line

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


class _Verifier:
    """One worker process per Python process, started on first use."""

    def __init__(self) -> None:
        self._worker: _Worker | None = None
        self._lock = threading.Lock()

    def check(self, gold: str, boxed: str, timeout_s: float) -> bool:
        with self._lock:
            if self._worker is None:
                self._worker = _Worker()
            reply = self._worker.ask(gold, boxed, timeout_s)
            if reply is None:
                worker, self._worker = self._worker, None
                code = worker.stop()
                if not worker.ended:
                    logger.warning("math-verify ran past %.1f s on the answer %.80r: counted "
                                   "as wrong", timeout_s, boxed)
                else:  # e.g. killed for memory: no more settled than an overrun
                    logger.warning("math-verify's worker ended (exit code %s) on the answer "
                                   "%.80r: counted as wrong", code, boxed)
                return False
        if "error" in reply:
            raise RuntimeError(f"math-verify failed on the answer {boxed!r} (gold {gold!r}): "
                               f"{reply['error']}")
        return bool(reply["correct"])

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


_VERIFIER = _Verifier()
os.register_at_fork(after_in_child=_VERIFIER.forget_after_fork)
atexit.register(_VERIFIER.stop)


def start_verifier() -> None:
    """Start the worker process now (it takes a second or two to import sympy), so that
    the first answer checked is not charged with it."""
    _VERIFIER.check("1", "1", timeout_s=START_TIMEOUT_S)


def verify_bounded(gold: str, boxed: str, timeout_s: float = VERIFY_TIMEOUT_S) -> bool:
    """`verify_boxed` in the worker process: False when it takes longer than `timeout_s`
    (the worker is then replaced). Safe from any thread and any process."""
    return _VERIFIER.check(gold, boxed, timeout_s)
