"""The processes that the sandboxes of a test leave: this test process's live descendants,
less those that were there when the test began (a Ray driver that earlier tests of the
same session started) and the bounded-call worker's (scorers; it is replaced whenever a
call overruns, so its pid changes between tests)."""

from __future__ import annotations

import psutil

from src.sandboxes.bounded_call import worker_pid

_present_at_start: set[int] = set()


def live_descendants() -> list[psutil.Process]:
    """This process's descendants that have not ended."""
    alive = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            continue
    return alive


def note_present_processes() -> None:
    """Called as a test begins: what runs now is not the test's."""
    _present_at_start.clear()
    _present_at_start.update(process.pid for process in live_descendants())


def sandbox_processes() -> list[psutil.Process]:
    """The live descendants the test started (a pid namespace's processes are still
    descendants of the bwrap that made it, as the host sees them)."""
    scorer = worker_pid()
    scorers = set()
    if scorer is not None:
        try:
            root = psutil.Process(scorer)
            scorers = {scorer, *(child.pid for child in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            pass
    return [process for process in live_descendants()
            if process.pid not in _present_at_start and process.pid not in scorers]
