"""The supervisor's request loop: each request of the host answered, a call run under its
bounds and classified, the sessions kept between calls."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from functools import partial

from .bounds import classify, preexec
from .files import read, write
from .processes import Processes, cpu_seconds
from .protocol import encode, reply
from .sessions import Session
from .watch import discard_pending, watch


class Supervisor:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.limits = config["limits"]
        self.workdir = config["workdir"]
        self.processes = Processes(config["pid_namespace"])
        self.sessions: dict[str, Session] = {}
        self.lost: set[str] = set()  # kinds whose interpreter a call ended

    def session_pids(self) -> set[int]:
        return {session.process.pid for session in self.sessions.values()
                if session.process.poll() is None}

    def environment(self) -> dict[str, str]:
        return dict(self.config["env"])

    def run(self, request: dict) -> dict:
        keep = self.session_pids()
        timeout = min(request.get("timeout") or self.limits["wall_timeout_s"],
                      self.limits["wall_timeout_s"])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        try:
            main = subprocess.Popen(request["argv"], cwd=self.workdir, env=self.environment(),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE,
                                    preexec_fn=partial(preexec, self.limits), close_fds=True)
        except OSError as error:
            return {"status": "error_exit", "exit_code": 127,
                    "stderr": encode(f"cannot run {request['argv'][0]!r}: {error}\n".encode()),
                    "wall_s": time.monotonic() - start}
        self.processes.children[main.pid] = main
        streams = {main.stdout.fileno(): "stdout", main.stderr.fileno(): "stderr"}
        seen = watch(self.limits, self.processes, self.end, main, streams, start + timeout,
                     base64.b64decode(request["stdin"]))
        self.processes.kill_leftovers(keep)
        code = main.wait()
        self.processes.children.pop(main.pid, None)
        for pipe in (main.stdout, main.stderr):
            pipe.close()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return classify(self.config, seen, code, time.monotonic() - start, cpu, timeout)

    def session_call(self, request: dict) -> dict:
        kind = request["kind"]
        restarted = False
        session = self.sessions.get(kind)
        if session is None or session.process.poll() is not None:
            if session is not None:
                session.stop()
            restarted = kind in self.lost or session is not None
            self.lost.discard(kind)
            session = self.sessions[kind] = Session(kind, self.config["python"], self.limits,
                                                    self.workdir, self.environment())
            self.processes.children[session.process.pid] = session.process
        timeout = min(request.get("timeout") or self.limits["wall_timeout_s"],
                      self.limits["wall_timeout_s"])
        start = time.monotonic()
        cpu_start = cpu_seconds(session.process.pid)
        # an interpreter gone already fails the write; watch() then sees it ended
        with contextlib.suppress(OSError):
            session.send(request["code"], self.limits["cpu_time_s"])
        streams = {session.stdout: "stdout", session.stderr: "stderr"}
        seen = watch(self.limits, self.processes, self.end, session.process, streams,
                     start + timeout, b"", done_fd=session.answers, cpu_start=cpu_start)
        cpu = cpu_seconds(session.process.pid) - cpu_start
        done = seen["done"] or {}
        if seen["bound"] is not None or done.get("ended", False):
            session.stop()
            self.sessions.pop(kind, None)
            self.lost.add(kind)
        self.processes.kill_leftovers(self.session_pids())
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
        result = classify(self.config, seen, code, time.monotonic() - start, max(cpu, 0.0),
                          timeout)
        result["session_restarted"] = restarted
        return result

    def restart(self, request: dict) -> dict:
        session = self.sessions.pop(request["kind"], None)
        self.lost.discard(request["kind"])
        if session is not None:
            session.stop()
            self.processes.kill_leftovers(self.session_pids())
        return {}

    def serve(self) -> None:
        reply({"ready": True})
        handlers = {"run": self.run, "session": self.session_call,
                    "write": partial(write, self.workdir), "read": partial(read, self.workdir),
                    "restart": self.restart}
        for line in sys.stdin.buffer:
            request = json.loads(line)
            handler = handlers[request["op"]]
            try:
                answer = handler(request)
            except Exception as error:  # the supervisor's own failure: this call's only
                answer = {"status": "infrastructure_error", "error": repr(error),
                          "detail": f"the sandbox could not run the call: {error!r}"}
            reply(answer)
        self.end()

    def end(self) -> None:
        """The host closed the sandbox, or died: nothing of it outlives the supervisor."""
        self.processes.kill_leftovers(set())
        os._exit(0)
