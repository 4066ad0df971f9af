"""The host's side of a sandbox: the supervisor process (src/sandboxes/supervisor/)
started by a backend's command, spoken to over its stdin and stdout.

Every wait on the supervisor is bounded (the call's wall bound plus `hang_grace_s`); a
supervisor that ends, hangs or answers garbage is killed with its whole sandbox and the
call returns `sandbox_died`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from src.sandboxes.contract import (
    CallResult,
    CallStatus,
    FileContent,
    Files,
    Sandbox,
    SandboxUnavailable,
    Session,
    SessionKind,
)
from src.sandboxes.settings import SandboxSettings

SUPERVISOR = Path(__file__).with_name("supervisor")  # run as a folder: see its __main__.py
T = TypeVar("T")
START_GRACE_S = 2.0  # the kill-and-sweep of a call that hit a bound, beyond its bound


class _Spawner:
    """Starts every sandbox (and the bounded-call worker) from one thread that lives as long
    as this process: PR_SET_PDEATHSIG (bubblewrap's --die-with-parent) fires when the
    *thread* that started a process ends, so a sandbox opened from a short-lived worker
    thread would die with it."""

    def __init__(self) -> None:
        self.forget_after_fork()

    def run(self, start: Callable[[], T]) -> T:
        """`start()` (which starts a process) called on the spawner's thread."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="sandbox-spawner",
                                                daemon=True)
                self._thread.start()
        started: Future = Future()
        self._requests.put((start, started))
        return started.result()

    def popen(self, argv: list[str], **options: Any) -> subprocess.Popen:
        return self.run(lambda: subprocess.Popen(argv, **options))

    def _serve(self) -> None:
        while True:
            start, started = self._requests.get()
            try:
                started.set_result(start())
            except BaseException as error:  # handed to the caller's thread
                started.set_exception(error)

    def forget_after_fork(self) -> None:
        """Also in a forked child: the parent's thread is not there (a request would wait
        for ever), and its lock may be held by a thread the child does not have."""
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()


SPAWNER = _Spawner()
os.register_at_fork(after_in_child=SPAWNER.forget_after_fork)


def child_pids(pid: int) -> list[int]:
    """The host pids of `pid`'s children."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as stat:
                    if int(stat.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def relative_path(path: str) -> str:
    """`path` checked to stay inside a working directory (the caller's mistake otherwise)."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"sandbox path {path!r}: give a path relative to the working "
                         f"directory, without '..'")
    return str(pure)


class SupervisedSandbox(Sandbox):
    """A sandbox whose supervisor runs under `argv` (a backend's command line)."""

    def __init__(self, argv: list[str], settings: SandboxSettings,
                 host_workdir: Path | None = None) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.settings = settings
        self.host_workdir = host_workdir  # unsafe_process only: deleted at close
        self._lock = threading.RLock()
        self._buffer = bytearray()
        self._sessions: dict[str, SupervisedSession] = {}
        self._closed = False
        self.death = ""  # why the sandbox died, once it has
        self.process = SPAWNER.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        answer = self._answer(settings.start_timeout_s)
        # the supervisor's host pid (bwrap's child; the process itself without bwrap):
        # killed directly, because bwrap's death does not reach it on a root host (its
        # parent-death signal needs a permission bwrap drops)
        self.supervisor_pid = next(iter(child_pids(self.process.pid)), self.process.pid)
        if answer is None or not answer.get("ready"):
            reason = self.death or "no ready line"
            self.close()
            raise SandboxUnavailable(f"sandbox could not start: {reason}")

    @property
    def alive(self) -> bool:
        return not self._closed and not self.death

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ the protocol

    def _kill(self, reason: str) -> None:
        if not self.death:
            errors = self._stderr_tail()
            self.death = reason + (f"; supervisor stderr: {errors}" if errors else "")
        self._kill_processes()

    def _kill_processes(self) -> None:
        """SIGKILL the supervisor (under bubblewrap, process 1 of the pid namespace: the
        kernel kills the rest) and bwrap."""
        for pid in {getattr(self, "supervisor_pid", self.process.pid), self.process.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()

    def _stderr_tail(self) -> str:
        """What the supervisor (or bwrap) printed to stderr so far, its last 2000 bytes."""
        stream = self.process.stderr
        if stream is None or stream.closed:
            return ""
        os.set_blocking(stream.fileno(), False)
        try:
            data = stream.read() or b""
        except OSError:
            data = b""
        return data[-2000:].decode("utf-8", "replace").strip()

    def _answer(self, timeout_s: float) -> dict | None:
        """The supervisor's next answer within `timeout_s`; None (the sandbox killed,
        `death` saying why) when it ends, hangs or answers garbage."""
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill(f"the supervisor did not answer within {timeout_s:g} s")
                return None
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                data = os.read(fd, 1 << 20)
                if not data:
                    code = self.process.wait()
                    self._kill(f"the supervisor ended (exit status {code})")
                    return None
                self._buffer += data
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self._kill("the supervisor answered garbage")
            return None
        return answer

    def _request(self, request: dict, timeout_s: float) -> dict | None:
        """Send one request and wait for its answer; None when the sandbox died."""
        if self._closed:
            raise ValueError(f"sandbox {self.id} is closed")
        if self.death:
            return None
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill("the supervisor's input closed")
            return None
        return self._answer(timeout_s)

    def _call(self, request: dict, timeout_s: float | None) -> CallResult:
        wall = min(timeout_s or self.settings.limits.wall_timeout_s,
                   self.settings.limits.wall_timeout_s)
        request["timeout"] = wall
        with self._lock:
            start = time.monotonic()
            answer = self._request(request, wall + START_GRACE_S + self.settings.hang_grace_s)
            if answer is None:
                return CallResult(status=CallStatus.SANDBOX_DIED, detail=self.death,
                                  wall_s=time.monotonic() - start)
        return CallResult(
            status=CallStatus(answer["status"]), exit_code=answer.get("exit_code"),
            signal=answer.get("signal"),
            stdout=base64.b64decode(answer.get("stdout", "")).decode("utf-8", "replace"),
            stderr=base64.b64decode(answer.get("stderr", "")).decode("utf-8", "replace"),
            output_truncated=answer.get("truncated", False),
            output_bytes=answer.get("printed", 0), wall_s=answer.get("wall_s", 0.0),
            cpu_s=answer.get("cpu_s", 0.0), detail=answer.get("detail", ""),
            session_restarted=answer.get("session_restarted", False))

    # ------------------------------------------------------------------- the contract

    def run(self, command: Sequence[str] | str, *, timeout_s: float | None = None,
            stdin: bytes | str | None = None) -> CallResult:
        if isinstance(command, str):
            argv = ["bash", "-c", command]
        else:
            argv = list(command)
            if not argv or not all(isinstance(part, str) for part in argv):
                raise ValueError(f"sandbox run: a command is a non-empty list of strings or "
                                 f"a string, got {command!r}")
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        return self._call({"op": "run", "argv": argv,
                           "stdin": base64.b64encode(data).decode()}, timeout_s)

    def run_python(self, code: str, *, timeout_s: float | None = None) -> CallResult:
        return self.run(["python3", "-c", code], timeout_s=timeout_s)

    def session(self, kind: SessionKind) -> Session:
        if kind not in ("python", "bash"):
            raise ValueError(f"sandbox session: kind is 'python' or 'bash', got {kind!r}")
        with self._lock:
            if kind not in self._sessions:
                self._sessions[kind] = SupervisedSession(self, kind)
            return self._sessions[kind]

    def _file_request(self, request: dict) -> dict:
        with self._lock:
            answer = self._request(request, self.settings.hang_grace_s + START_GRACE_S)
        if answer is None:
            raise SandboxUnavailable(f"sandbox {self.id} died: {self.death}")
        return answer

    def write_file(self, path: str, data: bytes | str) -> None:
        content = data.encode() if isinstance(data, str) else data
        answer = self._file_request({"op": "write", "path": relative_path(path),
                                     "data": base64.b64encode(content).decode()})
        if "error" in answer:
            raise SandboxUnavailable(f"sandbox {self.id}: {answer['error']}")

    def write_files(self, files: Files) -> None:
        for path, data in files.items():
            self.write_file(path, data)

    def read_file(self, path: str) -> FileContent | None:
        answer = self._file_request({"op": "read", "path": relative_path(path),
                                     "max": self.settings.max_read_bytes})
        if answer.get("missing"):
            return None
        return FileContent(data=base64.b64decode(answer["data"]), size=answer["size"],
                           truncated=answer["truncated"])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError, ValueError):
            # end of input: the supervisor kills every process of its calls and exits
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=2.0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # its whole process group (unsafe_process: what left the supervisor's tree)
            os.killpg(self.process.pid, signal.SIGKILL)
        self._kill_processes()
        for stream in (self.process.stdout, self.process.stderr):
            with contextlib.suppress(OSError):
                stream.close()
        if self.host_workdir is not None:
            shutil.rmtree(self.host_workdir, ignore_errors=True)


class SupervisedSession(Session):
    def __init__(self, sandbox: SupervisedSandbox, kind: SessionKind) -> None:
        self.sandbox = sandbox
        self.kind = kind

    def call(self, code: str, *, timeout_s: float | None = None) -> CallResult:
        return self.sandbox._call({"op": "session", "kind": self.kind, "code": code},
                                  timeout_s)

    def restart(self) -> None:
        with self.sandbox._lock:
            answer = self.sandbox._request({"op": "restart", "kind": self.kind},
                                           self.sandbox.settings.hang_grace_s + START_GRACE_S)
        if answer is None:
            raise SandboxUnavailable(f"sandbox {self.sandbox.id} died: {self.sandbox.death}")
