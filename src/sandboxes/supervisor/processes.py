"""The sandbox's processes as /proc shows them: counting them, and sweeping away those a
call left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


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


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Processes:
    """The processes of one sandbox: in its own pid namespace (`pid_namespace`, under
    bubblewrap) every process there, else the supervisor's descendants."""

    def __init__(self, pid_namespace: bool) -> None:
        self.pid_namespace = pid_namespace
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

    def count(self) -> int:
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
