"""A call's output and bounds while it runs: its pipes read as they fill, its wall time,
its process count and (a session's) CPU time watched, until it ends or hits a bound."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Callable

from .processes import Processes, cpu_seconds
from .protocol import CHUNK, HOST

POLL_S = 0.02


def watch(limits: dict, processes: Processes, end: Callable[[], None],
          main: subprocess.Popen, streams: dict[int, str], deadline: float, stdin: bytes,
          done_fd: int | None = None, cpu_start: float = 0.0) -> dict:
    """Read the call's output until it ends or a bound is hit; the outcome's fields
    (not yet classified). A command ends when its main process exits (what is then
    in its pipes is read; background writers are not waited for); a session call
    when the interpreter answers on `done_fd` or exits. For a session, `main` is the
    interpreter and its CPU seconds past `cpu_start` are bounded."""
    limit = limits["output_limit_bytes"]
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
            if processes.count() >= limits["max_processes"]:
                bound = "process_limit"
                break
            if done_fd is not None and cpu_seconds(main.pid) - cpu_start \
                    > limits["cpu_time_s"]:
                bound = "cpu_limit"
                break
        if main.poll() is not None:
            # ended: what it printed is in the pipes already
            for stream_fd in list(open_fds & set(streams)):
                drain(stream_fd, streams, output, open_fds, limit)
            printed = len(output["stdout"]) + len(output["stderr"])
            if done_fd is not None and done is None:
                done = {"ended": True}
            break
        writers = [stdin_fd] if stdin_fd is not None else []
        readable, writable, _ = select.select([*open_fds, HOST], writers, [], POLL_S)
        if HOST in readable:
            # the host sends nothing during a call: its input ended, it closed the
            # sandbox or died - nothing of the sandbox outlives it
            end()
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
                    drain(stream_fd, streams, output, open_fds, limit)
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


def drain(fd: int, streams: dict[int, str], output: dict, open_fds: set,
          limit: int) -> None:
    """Read what is in the pipe now, up to just past the output bound `limit`."""
    os.set_blocking(fd, False)
    try:
        while len(output["stdout"]) + len(output["stderr"]) <= limit:
            data = os.read(fd, CHUNK)
            if not data:
                break
            output[streams[fd]] += data
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, True)
    open_fds.discard(fd)


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
