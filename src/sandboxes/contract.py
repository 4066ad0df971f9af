"""The sandbox contract: what a task or a tool may ask of the place where model code runs.

An episode opens one `Sandbox` (`SandboxBackend.open(files)`), its working directory seeded
with `files`; runs commands (`run`), pieces of Python (`run_python`) and persistent
sessions (`session("python")`, `session("bash")`) in it; reads and writes files of its
working directory; and closes it (`close`, also on every error path: use `with`).

Outcomes, never exceptions, for anything the code in the sandbox does: every call returns a
`CallResult` whose `status` names what happened, bounds and a dead sandbox included. The
only exceptions are the caller's own mistakes (`ValueError`: a path outside the working
directory, a closed sandbox used) and, from the file operations and `open`,
`SandboxUnavailable` when the sandbox cannot do its job (it died, it could not start).

Retry: a call never retries by itself. A caller that wants to retry infrastructure
failures checks `result.status.is_infrastructure` and, for a bounded number of tries,
opens a new sandbox (the old one is gone: its files and session state with it) and calls
again; `retry_infrastructure` below is that loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from types import TracebackType
from typing import Literal

from pydantic import BaseModel, ConfigDict

# A sandbox's seed files: a path relative to its working directory -> the file's content
# (str is written as UTF-8). Folders are made as needed.
Files = Mapping[str, bytes | str]
SessionKind = Literal["python", "bash"]


class CallStatus(StrEnum):
    """What ended a call. The first bound the supervisor enforced wins; then a signal
    that names a bound (SIGXCPU, SIGXFSZ); then what the process reported (a failed
    allocation, a failed fork, a full disk, as listed per member); then the exit status."""

    OK = "ok"  # exit status 0
    ERROR_EXIT = "error_exit"  # a non-zero exit status (or a signal no bound explains)
    TIMEOUT = "timeout"  # the wall-time bound: the call's processes were killed
    CPU_LIMIT = "cpu_limit"  # RLIMIT_CPU: a process got SIGXCPU / was killed at the bound
    # RLIMIT_AS: an allocation failed (Python's MemoryError, "Cannot allocate memory",
    # "out of memory", std::bad_alloc in the output with a non-zero exit)
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"  # output_limit_bytes printed: the processes were killed
    # RLIMIT_NPROC: a fork failed ("Resource temporarily unavailable" / BlockingIOError
    # with a non-zero exit, or the process count found at the bound)
    PROCESS_LIMIT = "process_limit"
    # RLIMIT_FSIZE: a process got SIGXFSZ (a shell: "File size limit exceeded"; Python,
    # which ignores the signal: "File too large")
    FILE_SIZE_LIMIT = "file_size_limit"
    DISK_LIMIT = "disk_limit"  # the working directory is full ("No space left on device")
    # infrastructure: the sandbox died or hung mid-call (it is closed; open a new one)
    SANDBOX_DIED = "sandbox_died"
    # infrastructure: the sandbox could not run the call (e.g. the interpreter failed to
    # start); the sandbox itself may still work
    INFRASTRUCTURE_ERROR = "infrastructure_error"

    @property
    def is_infrastructure(self) -> bool:
        """The call says nothing about the code: the sandbox, not the model, failed."""
        return self in (CallStatus.SANDBOX_DIED, CallStatus.INFRASTRUCTURE_ERROR)


class CallResult(BaseModel):
    """One call's outcome.

    Attributes:
        status: what ended the call (see `CallStatus`).
        exit_code: the exit status of the call's main process; None when it was killed by a
            signal or never ran.
        signal: the signal that ended the main process (e.g. 9 after a bound's kill, 24
            SIGXCPU, 25 SIGXFSZ); None otherwise.
        stdout, stderr: the output, decoded as UTF-8 (invalid bytes replaced), together at
            most `limits.output_limit_bytes` bytes.
        output_truncated: True when more was printed than kept; the note below says so.
        output_bytes: the bytes printed to stdout and stderr together, as far as read.
        wall_s: seconds from the call's start to its end (its processes gone).
        cpu_s: user + system CPU seconds of the call's processes that were waited for
            (a persistent session: its interpreter's CPU during the call).
        detail: one line for a reader: which bound was hit and its value, or why the
            sandbox failed; empty for ok and error_exit.
        session_restarted: a session call only: the session's interpreter had to be
            started again before this call (the earlier one was killed by a bound or
            died), so state from before is lost.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: CallStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    output_truncated: bool = False
    output_bytes: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    detail: str = ""
    session_restarted: bool = False

    @property
    def ok(self) -> bool:
        return self.status is CallStatus.OK


class FileContent(BaseModel):
    """A file read from the working directory: at most `max_read_bytes` of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: bytes
    size: int  # the file's whole size in bytes
    truncated: bool  # True when data holds only the first bytes of the file


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot serve a request: it died, hung, or could not start. Raised by
    `SandboxBackend.open` and the file operations; calls return a status instead."""


class SandboxNotAvailableOnHost(RuntimeError):
    """This host cannot create the configured sandbox (no user namespaces, no bwrap).
    The message says what to do. Raised by `check_sandbox_available` and `open`."""


class Session(ABC):
    """A persistent interpreter in a sandbox: Python or bash, whose state (variables,
    imports, functions, the current folder, shell variables) lasts from one call to the
    next, as in a notebook. Calls are sequential (a sandbox serves one call at a time).

    Each call is bounded by the sandbox's `CallLimits` (the wall time per call; CPU
    seconds per call, counted from the call's start). A call that hits the wall, CPU,
    output or memory bound, or that ends the interpreter (`exit()`), costs the state:
    the interpreter is killed and the next call starts a fresh one, its result marked
    `session_restarted`. Processes a call starts in the background are killed when the
    call ends.
    """

    kind: SessionKind

    @abstractmethod
    def call(self, code: str, *, timeout_s: float | None = None) -> CallResult:
        """Run `code` in the interpreter (Python: statements, the value of a last bare
        expression printed as the REPL would; bash: a script in the running shell). The
        exit code is 0 or 1 (Python: an uncaught exception, its traceback on stderr) or,
        for bash, the status of the last command. `timeout_s` lowers the wall bound."""

    @abstractmethod
    def restart(self) -> None:
        """Throw the state away: the next call starts a fresh interpreter."""


class Sandbox(ABC):
    """One episode's sandbox: a private working directory (the current folder of every
    call, `HOME` and `TMPDIR` too) and the processes of its calls.

    Bubblewrap backend: no network (an empty network namespace: loopback only); a
    read-only view of the interpreter's installation and the system's libraries and
    programs (/usr, /bin, /lib, /etc); no home folder, no project checkout, no host /tmp,
    no other sandbox's files; its own process tree (a pid namespace) that dies with the
    sandbox and with the process that opened it. The working directory is a tmpfs of
    `workdir_bytes` bytes, gone at close.

    Thread safety: calls and file operations on one sandbox are serialised (a lock);
    different sandboxes run in parallel.
    """

    id: str

    @property
    @abstractmethod
    def alive(self) -> bool:
        """False once closed or after its supervisor died."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once `close` was called (a sandbox that died is not alive, yet still holds
        what `close` releases)."""

    @abstractmethod
    def run(self, command: Sequence[str] | str, *, timeout_s: float | None = None,
            stdin: bytes | str | None = None) -> CallResult:
        """Run a command in the working directory: an argv list (no shell) or a string
        run by `bash -c`. `stdin` is its input (none: an empty input). Every process it
        started is killed when the call ends. `timeout_s` lowers the wall bound."""

    @abstractmethod
    def run_python(self, code: str, *, timeout_s: float | None = None) -> CallResult:
        """Run `code` in a fresh Python interpreter (the sandbox's `python3`), as
        `python3 -c code` would; nothing lasts to the next call but the files."""

    @abstractmethod
    def session(self, kind: SessionKind) -> Session:
        """The sandbox's persistent session of this kind (one per kind, started at its
        first call and closed with the sandbox)."""

    @abstractmethod
    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file of the working directory (str as UTF-8), making its folders.
        `path` is relative to the working directory (ValueError for an absolute path or
        one leaving it with `..`). A full working directory raises `SandboxUnavailable`."""

    @abstractmethod
    def read_file(self, path: str) -> FileContent | None:
        """A file of the working directory, at most `max_read_bytes` of it; None when
        there is no regular file at `path` (missing, a folder, a link out)."""

    @abstractmethod
    def close(self) -> None:
        """Kill every process of the sandbox and delete its working directory. Idempotent;
        never raises."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class SandboxBackend(ABC):
    """Opens sandboxes of one kind (`SandboxSettings.backend`)."""

    @abstractmethod
    def open(self, files: Files | None = None) -> Sandbox:
        """A new sandbox, started and answering, its working directory holding `files`.
        Raises `SandboxUnavailable` when it cannot start within `start_timeout_s`."""


def retry_infrastructure(open_sandbox: Callable[[], Sandbox],
                         call: Callable[[Sandbox], CallResult], tries: int) -> CallResult:
    """The caller's bounded retry of infrastructure failures: `call` in a sandbox from
    `open_sandbox`, again in a new one (closing the old) while the result is an
    infrastructure failure (or the sandbox could not open), at most `tries` times in all;
    the last result is returned.
    Only for calls that need nothing from an earlier sandbox (its files and sessions are
    lost); model-caused statuses are never retried."""
    if tries < 1:
        raise ValueError(f"retry_infrastructure: tries must be at least 1, got {tries}")
    result = CallResult(status=CallStatus.SANDBOX_DIED)
    for _ in range(tries):
        try:
            sandbox = open_sandbox()
        except SandboxUnavailable as error:
            result = CallResult(status=CallStatus.SANDBOX_DIED, detail=str(error))
            continue
        with sandbox:
            result = call(sandbox)
        if not result.status.is_infrastructure:
            break
    return result
