"""The process inside a sandbox: it runs the calls and enforces their bounds.

Standard library only, and no import of the project: it runs as a file under the sandbox's
own interpreter (`python3 -I supervisor.py serve CONFIG`), where the project is not
mounted. Under bubblewrap it is the sandbox's process 1: the model's code, running as the
same user, cannot kill it (process 1 of a pid namespace ignores signals it has no handler
for) nor read its file descriptors (it is not dumpable).

Protocol with the host: one JSON object a line on stdin (requests) and stdout (answers),
bytes in base64. Requests: {"op": "write", "path", "data"}, {"op": "read", "path", "max"},
{"op": "run", "argv", "stdin", "timeout"}, {"op": "session", "kind", "code", "timeout"},
{"op": "restart", "kind"}. The first line it writes is {"ready": true}.

A call: its processes get the resource limits; the supervisor reads their output (at most
output_limit_bytes), watches the wall time, the process count and, for a session, the
interpreter's CPU time; on a bound it freezes and kills the call's processes. When a call
ends, every process it left (background jobs) is killed: only the supervisor and the
sessions' interpreters outlive a call.

`launch` mode (a host running as root): the sandbox's user is mapped to an unprivileged
host uid, because RLIMIT_NPROC does not hold for processes of the host's root. It makes a
user namespace mapping uid 0 to root (bubblewrap's set-up needs it to read the
interpreter's files) and uid 1000 to the given uid, then runs bwrap in it; the supervisor
then drops to uid 1000 (its capabilities go with it).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
import time

SANDBOX_UID = 1000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWUSER = 0x10000000
POLL_S = 0.02
HOST = 0  # the host's requests come on stdin
CHUNK = 65536

# what a process prints when a bound made a system call fail, by the bound's status
MARKERS = {
    "memory_limit": re.compile(rb"MemoryError|Cannot allocate memory|[Oo]ut of memory|bad_alloc"),
    "process_limit": re.compile(rb"Resource temporarily unavailable|BlockingIOError|"
                                rb"can't start new thread|fork: retry"),
    "disk_limit": re.compile(rb"No space left on device"),
    # how a shell reports a child killed by SIGXCPU / SIGXFSZ
    "cpu_limit": re.compile(rb"CPU time limit exceeded"),
    # (Python ignores SIGXFSZ: its write fails with EFBIG instead)
    "file_size_limit": re.compile(rb"File size limit exceeded|File too large"),
}


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ---------------------------------------------------------------- processes of a call


def process_table() -> dict[int, tuple[int, bool]]:
    """pid -> (parent pid, is a zombie) of every process this supervisor can see."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                table[int(name)] = (int(fields[1]), fields[0] == b"Z")
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return table


def descendants(root: int, table: dict[int, tuple[int, bool]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def signal_all(pids: set[int], number: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, number)


class Supervisor:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.limits = config["limits"]
        self.workdir = config["workdir"]
        self.pid_namespace = config["pid_namespace"]
        self.sessions: dict[str, Session] = {}
        self.lost: set[str] = set()  # kinds whose interpreter a call ended
        self.children: dict[int, subprocess.Popen] = {}  # children with a Popen

    def leftovers(self, keep: set[int]) -> set[int]:
        """The live processes of the sandbox but the supervisor and `keep`; ended
        children of the supervisor (orphans re-parented to it) are reaped on the way."""
        me = os.getpid()
        table = process_table()
        if not self.pid_namespace:
            mine = descendants(me, table)
            table = {pid: entry for pid, entry in table.items() if pid in mine}
        for pid, (parent, zombie) in table.items():
            if zombie and parent == me:
                self.reap(pid)
        return {pid for pid, (_, zombie) in table.items() if not zombie} - keep - {me}

    def process_count(self) -> int:
        """The processes of the sandbox, the supervisor and unreaped zombies included (a
        zombie holds its RLIMIT_NPROC slot until reaped)."""
        table = process_table()
        if self.pid_namespace:
            return len(table)
        return len(descendants(os.getpid(), table)) + 1

    def reap(self, pid: int) -> None:
        """Collect an ended child: through its Popen when it has one (so that Popen
        still learns its exit status), else directly."""
        if pid in self.children:
            if self.children[pid].poll() is not None:
                del self.children[pid]
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)

    def kill_leftovers(self, keep: set[int]) -> None:
        """Freeze, then kill, every process outside `keep`; `keep` is thawed. Frozen
        processes cannot fork, so a fork bomb cannot outrun the sweep."""
        if self.pid_namespace:
            # process 1 signalling -1: every process of the namespace but itself, at once
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGSTOP)
        for _ in range(1000):
            found = self.leftovers(keep)
            if not found:
                break
            signal_all(found, signal.SIGSTOP)
            signal_all(found, signal.SIGKILL)
            time.sleep(0.001)
        signal_all(keep, signal.SIGCONT)

    def session_pids(self) -> set[int]:
        return {session.process.pid for session in self.sessions.values()
                if session.process.poll() is None}

    def preexec(self, cpu_bound: bool = True) -> None:
        """In the child before exec: its own session and the call's resource limits
        (without the CPU one for a session's interpreter: its CPU is bounded per call)."""
        os.setsid()
        limits = self.limits
        if cpu_bound:
            cpu = max(1, int(limits["cpu_time_s"] + 0.999))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_bytes"],) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2)
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"],) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    def environment(self) -> dict[str, str]:
        return dict(self.config["env"])

    # ------------------------------------------------------------------- a call's output

    def watch(self, main: subprocess.Popen, streams: dict[int, str], deadline: float,
              stdin: bytes, done_fd: int | None = None, cpu_start: float = 0.0) -> dict:
        """Read the call's output until it ends or a bound is hit; the outcome's fields
        (not yet classified). A command ends when its main process exits (what is then
        in its pipes is read; background writers are not waited for); a session call
        when the interpreter answers on `done_fd` or exits. For a session, `main` is the
        interpreter and its CPU seconds past `cpu_start` are bounded."""
        limit = self.limits["output_limit_bytes"]
        output = {"stdout": bytearray(), "stderr": bytearray()}
        printed = 0
        bound = None
        done = None
        answer = bytearray()  # the session's answer line, as far as it has come
        pending_stdin = stdin
        open_fds = set(streams)
        if done_fd is not None:
            open_fds.add(done_fd)
        stdin_fd = main.stdin.fileno() if main.stdin is not None and done_fd is None else None
        if stdin_fd is not None and not pending_stdin:
            main.stdin.close()
            stdin_fd = None
        next_check = 0.0
        while True:
            now = time.monotonic()
            if now >= deadline:
                bound = "timeout"
                break
            if now >= next_check:
                next_check = now + 0.05
                # the sandbox's processes, as RLIMIT_NPROC counts them (threads aside)
                if self.process_count() >= self.limits["max_processes"]:
                    bound = "process_limit"
                    break
                if done_fd is not None and cpu_seconds(main.pid) - cpu_start \
                        > self.limits["cpu_time_s"]:
                    bound = "cpu_limit"
                    break
            if main.poll() is not None:
                # ended: what it printed is in the pipes already
                for stream_fd in list(open_fds & set(streams)):
                    self.drain(stream_fd, streams, output, open_fds)
                printed = len(output["stdout"]) + len(output["stderr"])
                if done_fd is not None and done is None:
                    done = {"ended": True}
                break
            writers = [stdin_fd] if stdin_fd is not None else []
            readable, writable, _ = select.select([*open_fds, HOST], writers, [], POLL_S)
            if HOST in readable:
                # the host sends nothing during a call: its input ended, it closed the
                # sandbox or died - nothing of the sandbox outlives it
                self.end()
            if writable:
                try:
                    sent = os.write(stdin_fd, pending_stdin[:CHUNK])
                except (BrokenPipeError, OSError):
                    sent = len(pending_stdin)
                pending_stdin = pending_stdin[sent:]
                if not pending_stdin:
                    main.stdin.close()
                    stdin_fd = None
            for fd in readable:
                if fd == done_fd:
                    if not read_available_line(fd, answer):
                        continue  # a partial line: the call's bounds still hold
                    open_fds.discard(fd)
                    done = parse_answer(bytes(answer))
                    # what was printed before the answer is already in the pipes
                    for stream_fd in list(open_fds & set(streams)):
                        self.drain(stream_fd, streams, output, open_fds)
                    printed = len(output["stdout"]) + len(output["stderr"])
                    break
                data = os.read(fd, CHUNK) if fd in open_fds else b""
                if not data:
                    open_fds.discard(fd)
                    continue
                output[streams[fd]] += data
                printed += len(data)
            if printed > limit:
                bound = "output_limit"
                break
            if done is not None:
                break
        truncated = printed > limit
        if truncated:
            keep_out = min(len(output["stdout"]), limit)
            output["stdout"] = output["stdout"][:keep_out]
            output["stderr"] = output["stderr"][:limit - keep_out]
        return {"bound": bound, "stdout": bytes(output["stdout"]),
                "stderr": bytes(output["stderr"]), "printed": printed,
                "truncated": truncated, "done": done}

    def drain(self, fd: int, streams: dict[int, str], output: dict, open_fds: set) -> None:
        """Read what is in the pipe now, up to just past the output bound."""
        os.set_blocking(fd, False)
        try:
            while len(output["stdout"]) + len(output["stderr"]) <= \
                    self.limits["output_limit_bytes"]:
                data = os.read(fd, CHUNK)
                if not data:
                    break
                output[streams[fd]] += data
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(fd, True)
        open_fds.discard(fd)

    # ---------------------------------------------------------------------- requests

    def run(self, request: dict) -> dict:
        keep = self.session_pids()
        timeout = min(request.get("timeout") or self.limits["wall_timeout_s"],
                      self.limits["wall_timeout_s"])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        try:
            main = subprocess.Popen(request["argv"], cwd=self.workdir, env=self.environment(),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, preexec_fn=self.preexec,
                                    close_fds=True)
        except OSError as error:
            return {"status": "error_exit", "exit_code": 127,
                    "stderr": encode(f"cannot run {request['argv'][0]!r}: {error}\n".encode()),
                    "wall_s": time.monotonic() - start}
        self.children[main.pid] = main
        streams = {main.stdout.fileno(): "stdout", main.stderr.fileno(): "stderr"}
        seen = self.watch(main, streams, start + timeout, base64.b64decode(request["stdin"]))
        self.kill_leftovers(keep)
        code = main.wait()
        self.children.pop(main.pid, None)
        for pipe in (main.stdout, main.stderr):
            pipe.close()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return self.result(seen, code, time.monotonic() - start, cpu, timeout)

    def session_call(self, request: dict) -> dict:
        kind = request["kind"]
        restarted = False
        session = self.sessions.get(kind)
        if session is None or session.process.poll() is not None:
            if session is not None:
                session.stop()
            restarted = kind in self.lost or session is not None
            self.lost.discard(kind)
            session = self.sessions[kind] = Session(self, kind)
            self.children[session.process.pid] = session.process
        timeout = min(request.get("timeout") or self.limits["wall_timeout_s"],
                      self.limits["wall_timeout_s"])
        start = time.monotonic()
        cpu_start = cpu_seconds(session.process.pid)
        # an interpreter gone already fails the write; watch() then sees it ended
        with contextlib.suppress(OSError):
            session.send(request["code"], self.limits["cpu_time_s"])
        streams = {session.stdout: "stdout", session.stderr: "stderr"}
        seen = self.watch(session.process, streams, start + timeout, b"",
                          done_fd=session.answers, cpu_start=cpu_start)
        cpu = cpu_seconds(session.process.pid) - cpu_start
        done = seen["done"] or {}
        if seen["bound"] is not None or done.get("ended", False):
            session.stop()
            self.sessions.pop(kind, None)
            self.lost.add(kind)
        self.kill_leftovers(self.session_pids())
        if kind in self.sessions:
            # what the call's killed background processes printed after its end
            for fd in (session.stdout, session.stderr):
                discard_pending(fd)
        code = session.process.returncode if done.get("ended") else done.get("exit_code")
        if not isinstance(code, int):
            code = None
        if seen["bound"] is None and done.get("exception") == "MemoryError":
            seen["bound"] = "memory_limit"
        elif seen["bound"] is None and done.get("exception") == "BlockingIOError":
            seen["bound"] = "process_limit"
        result = self.result(seen, code, time.monotonic() - start, max(cpu, 0.0), timeout)
        result["session_restarted"] = restarted
        return result

    def result(self, seen: dict, code: int | None, wall: float, cpu: float,
               timeout: float) -> dict:
        """Classify: the bound the supervisor enforced, then a bound's signal, then a
        bound's message on a failed exit, then the exit status."""
        signal_number = -code if code is not None and code < 0 else None
        exit_code = code if code is not None and code >= 0 else None
        bound = seen["bound"]
        details = {
            "timeout": f"killed after the wall-time bound of {timeout:g} s",
            "output_limit": f"killed after printing more than "
                            f"{self.limits['output_limit_bytes']} bytes",
            "process_limit": f"killed at the bound of {self.limits['max_processes']} "
                             f"processes",
            "cpu_limit": f"killed after the CPU-time bound of {self.limits['cpu_time_s']:g} s",
            "memory_limit": f"an allocation failed under the memory bound of "
                            f"{self.limits['memory_bytes']} bytes per process",
            "file_size_limit": f"a file reached the bound of {self.limits['max_file_bytes']} "
                               f"bytes",
            "disk_limit": f"the working directory is full "
                          f"({self.config['workdir_bytes']} bytes)",
        }
        if bound is None:
            if signal_number == signal.SIGXCPU:
                bound = "cpu_limit"
            elif signal_number == signal.SIGXFSZ:
                bound = "file_size_limit"
            elif code != 0:
                for name, marker in MARKERS.items():
                    if marker.search(seen["stderr"]) or marker.search(seen["stdout"][-4096:]):
                        bound = name
                        break
        status = bound or ("ok" if code == 0 else "error_exit")
        return {"status": status, "exit_code": exit_code, "signal": signal_number,
                "stdout": encode(seen["stdout"]), "stderr": encode(seen["stderr"]),
                "truncated": seen["truncated"], "printed": seen["printed"],
                "wall_s": wall, "cpu_s": cpu, "detail": details.get(bound, "")}

    def inside(self, path: str) -> str | None:
        """The real path of `path` under the working directory, None outside it."""
        full = os.path.realpath(os.path.join(self.workdir, path))
        root = os.path.realpath(self.workdir)
        return full if full == root or full.startswith(root + os.sep) else None

    def write(self, request: dict) -> dict:
        full = self.inside(request["path"])
        if full is None:
            return {"error": f"{request['path']!r} leads outside the working directory"}
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as file:
                file.write(base64.b64decode(request["data"]))
        except OSError as error:
            return {"error": f"cannot write {request['path']!r}: {error}"}
        return {}

    def read(self, request: dict) -> dict:
        full = self.inside(request["path"])
        if full is None or not os.path.isfile(full):
            return {"missing": True}
        try:
            with open(full, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                data = file.read(request["max"])
        except OSError:
            return {"missing": True}
        return {"data": encode(data), "size": size, "truncated": size > len(data)}

    def restart(self, request: dict) -> dict:
        session = self.sessions.pop(request["kind"], None)
        self.lost.discard(request["kind"])
        if session is not None:
            session.stop()
            self.kill_leftovers(self.session_pids())
        return {}

    def serve(self) -> None:
        reply({"ready": True})
        for line in sys.stdin.buffer:
            request = json.loads(line)
            handler = {"run": self.run, "session": self.session_call, "write": self.write,
                       "read": self.read, "restart": self.restart}[request["op"]]
            try:
                answer = handler(request)
            except Exception as error:  # the supervisor's own failure: this call's only
                answer = {"status": "infrastructure_error", "error": repr(error),
                          "detail": f"the sandbox could not run the call: {error!r}"}
            reply(answer)
        self.end()

    def end(self) -> None:
        """The host closed the sandbox, or died: nothing of it outlives the supervisor."""
        self.kill_leftovers(set())
        os._exit(0)


def reply(answer: dict) -> None:
    sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
    sys.stdout.buffer.flush()


def discard_pending(fd: int) -> None:
    os.set_blocking(fd, False)
    try:
        while os.read(fd, CHUNK):
            pass
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, True)


def parse_answer(line: bytes) -> dict:
    """A session's answer; a garbled one (the model's code wrote to the answer pipe)
    ends the session as if the interpreter had ended."""
    try:
        answer = json.loads(line)
    except ValueError:
        return {"ended": True}
    return answer if isinstance(answer, dict) else {"ended": True}


def read_available_line(fd: int, line: bytearray) -> bool:
    """Add to `line` what the non-blocking pipe `fd` holds now, up to a newline; True once
    the line is whole (or its writer closed the pipe). Never waits: a writer that sends
    part of a line and stops (the model's code can write to the session's answer pipe)
    must not hold the supervisor past the call's bounds."""
    while not line.endswith(b"\n"):
        try:
            chunk = os.read(fd, 1)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        line += chunk
    return True


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- sessions

PYTHON_DRIVER = r'''
import ast, json, os, resource, sys, traceback
requests = os.fdopen(3, "rb", buffering=0)
answers = os.fdopen(4, "wb", buffering=0)
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
del ast, json, os, resource, traceback
def _serve(requests=requests, answers=answers):
    import ast, json, resource, sys, traceback
    while True:
        header = requests.readline()
        if not header:
            return
        length, cpu = header.split()
        code = b""
        while len(code) < int(length):
            code += requests.read(int(length) - len(code))
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime + float(cpu)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
        exception = None
        try:
            tree = ast.parse(code.decode("utf-8", "replace"), "<cell>")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<cell>", "exec"), namespace)
            if last is not None:
                exec(compile(ast.Interactive([last]), "<cell>", "single"), namespace)
        except SystemExit:
            raise
        except BaseException as error:
            exception = type(error).__name__
            lines = traceback.format_exception(error)
            # the driver's own frame is not the model's business
            lines = [lines[0]] + [l for l in lines[1:] if "<cell>" in l or not l.startswith("  File")]
            sys.stderr.write("".join(lines))
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps({"exit_code": 1 if exception else 0,
                                  "exception": exception}).encode() + b"\n")
_serve()
'''

BASH_DRIVER = r'''
exec 0</dev/null
while LC_ALL=C IFS= read -r -u 3 __length; do
  LC_ALL=C IFS= read -r -d '' -N "$__length" -u 3 __code
  eval "$__code"
  printf '{"exit_code": %d}\n' "$?" >&4
done
'''


class Session:
    """A persistent interpreter: its requests on fd 3, its answers on fd 4, the model's
    output on its stdout and stderr."""

    def __init__(self, supervisor: Supervisor, kind: str) -> None:
        self.kind = kind
        self.used = False
        request_read, self.requests = os.pipe()
        self.answers, answer_write = os.pipe()
        os.set_blocking(self.answers, False)  # read as it comes: see read_available_line
        if kind == "python":
            argv = [supervisor.config["python"], "-u", "-c", PYTHON_DRIVER]
        else:
            argv = ["bash", "--norc", "--noprofile", "-c", BASH_DRIVER]

        def preexec() -> None:
            # via high numbers, so that neither end overwrites the other on its way; made
            # before the limits, whose max_open_files may be below them
            high_read = fcntl.fcntl(request_read, fcntl.F_DUPFD, 100)
            high_write = fcntl.fcntl(answer_write, fcntl.F_DUPFD, 100)
            supervisor.preexec(cpu_bound=False)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        self.process = subprocess.Popen(argv, cwd=supervisor.workdir,
                                        env=supervisor.environment(),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, preexec_fn=preexec,
                                        pass_fds=(3, 4))
        os.close(request_read)
        os.close(answer_write)
        self.stdout = self.process.stdout.fileno()
        self.stderr = self.process.stderr.fileno()

    def send(self, code: str, cpu_s: float) -> None:
        data = code.encode("utf-8")
        if self.kind == "bash":
            data += b"\n"
        header = f"{len(data)} {cpu_s}\n".encode() if self.kind == "python" \
            else f"{len(data)}\n".encode()
        os.write(self.requests, header)
        view = memoryview(data)
        while view:
            view = view[os.write(self.requests, view[:CHUNK]):]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        for fd in (self.requests, self.answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.process.stdout.close()
        self.process.stderr.close()


# ------------------------------------------------------------------------ start-up


def serve(config: dict) -> None:
    call = libc()
    if os.getuid() == 0 and config["drop_to_uid"]:
        os.chown(config["workdir"], SANDBOX_UID, SANDBOX_UID)
        leave_root()
    call.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    call.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # die with the parent (bwrap, or the host process): bwrap's own setting is cleared by
    # the change of uid above. Should the parent be gone already, the end of our input
    # ends us after the call in progress.
    call.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.makedirs(os.path.join(config["workdir"], ".tmp"), exist_ok=True)
    # no handler for SIGTERM or SIGINT (Python's own raises KeyboardInterrupt): process 1
    # of a pid namespace gets, from inside it, only the signals it handles, so the model's
    # `kill -TERM 1` would otherwise end the sandbox; the host ends it with SIGKILL
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    Supervisor(config).serve()


def leave_root() -> None:
    """After the root host's launch: leave uid 0 of the namespace, and every capability
    with it."""
    os.setgroups([])
    os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)


def launch(host_uid: int, argv: list[str]) -> None:
    """Run `argv` (bwrap) in a new user namespace mapping uid 0 to root and SANDBOX_UID to
    `host_uid` (a root host only: writing such maps needs CAP_SETUID)."""
    ready_read, ready_write = os.pipe()
    mapped_read, mapped_write = os.pipe()
    parent = os.getpid()
    helper = os.fork()
    if helper == 0:  # still outside: maps the parent's new namespace, then leaves
        os.close(ready_write)
        os.close(mapped_read)
        os.read(ready_read, 1)
        for kind in ("uid", "gid"):
            with open(f"/proc/{parent}/{kind}_map", "w") as mapping:
                mapping.write(f"0 0 1\n{SANDBOX_UID} {host_uid} 1\n")
        os.write(mapped_write, b"x")
        os._exit(0)
    os.close(ready_read)
    os.close(mapped_write)
    if libc().unshare(CLONE_NEWUSER) != 0:
        sys.exit(f"sandbox launch: unshare(CLONE_NEWUSER) failed: "
                 f"{os.strerror(ctypes.get_errno())}")
    os.write(ready_write, b"x")
    if os.read(mapped_read, 1) != b"x":
        sys.exit("sandbox launch: the user namespace's uid map could not be written")
    os.waitpid(helper, 0)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(json.loads(sys.argv[2]))
    elif sys.argv[1] == "launch":
        launch(int(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit(f"supervisor: unknown mode {sys.argv[1]!r}")
