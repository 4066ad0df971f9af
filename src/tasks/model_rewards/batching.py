"""Requests answered in batches, one call each: a model's judge chats, a reward model
actor's texts.

Two ways in. `submit_many` queues a group of requests together (a rubric scoring a
group's replies at once, src/tasks/rubric.py `score_group`): the group is answered alone,
in calls of at most `max_batch` of its requests in their order, joined by no other
request and waiting for none, so that what each call holds depends on the group only and
a run repeats bit for bit. `submit` queues one request, which requests submitted one by
one may join: reward functions called reply by reply run in the threads of episode steps
(a step that ran past its bound goes on in its thread beside the next; a caller may step
episodes from several threads), so such requests can arrive together, and then what a
call holds depends on when they came.

A `CallBatcher` has one worker thread. It takes the request first in line: a group's,
with the next of that group up to its `max_batch`; a single one, after waiting up to its
`window_s` for other single requests to join it, up to its `max_batch` of them. It answers
them with one call of `answer`, which returns each request's result or the exception to
raise for it. A caller waits for its own deadline only (`Future.result(timeout=...)`); a
request whose caller gave up before its call began is dropped. The worker exits when
nothing came for `IDLE_S`; the next request starts it again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

IDLE_S = 1.0  # a worker with nothing to do for this long exits

Request = TypeVar("Request")
Result = TypeVar("Result")


@dataclass(frozen=True)
class _Waiting(Generic[Request, Result]):
    """A queued request: how the call it leads is formed, its caller's future, and the
    group it came with (None: submitted alone, open to others)."""

    request: Request
    window_s: float
    max_batch: int
    reply: Future[Result]
    group: object | None


class CallBatcher(Generic[Request, Result]):
    """Requests answered in batches by one worker thread: see the module docstring."""

    def __init__(self, answer: Callable[[list[Request]], list[Result | BaseException]],
                 name: str) -> None:
        self._answer = answer
        self._name = name
        self._waiting: deque[_Waiting[Request, Result]] = deque()
        self._arrived = threading.Condition()
        self._worker: threading.Thread | None = None

    def submit(self, request: Request, window_s: float, max_batch: int) -> Future[Result]:
        """Queue `request`; its future holds its result (or the error). `window_s` and
        `max_batch` rule the batch it leads, if it is the first of one."""
        reply: Future[Result] = Future()
        self._queue([_Waiting(request, window_s, max_batch, reply, None)])
        return reply

    def submit_many(self, requests: Sequence[Request],
                    max_batch: int) -> list[Future[Result]]:
        """Queue `requests` as a group answered alone, in calls of at most `max_batch`
        of them in their order; each future holds its request's result (or the error)."""
        group = object()
        waiting = [_Waiting(request, 0.0, max_batch, Future(), group)
                   for request in requests]
        self._queue(waiting)
        return [entry.reply for entry in waiting]

    def _queue(self, waiting: list[_Waiting[Request, Result]]) -> None:
        with self._arrived:
            self._waiting.extend(waiting)
            self._arrived.notify()
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name=self._name,
                                                daemon=True)
                self._worker.start()

    def _leading(self, group: object | None) -> int:
        """How many requests at the front of the line came with `group` (None: alone)."""
        count = 0
        for entry in self._waiting:
            if entry.group is not group:
                break
            count += 1
        return count

    def _run(self) -> None:
        while True:
            with self._arrived:
                if not self._arrived.wait_for(lambda: bool(self._waiting), timeout=IDLE_S):
                    self._worker = None  # under the lock: the next submit starts another
                    return
                first = self._waiting[0]
                if first.group is None:  # alone: others submitted alone may join it
                    joined_by = time.monotonic() + first.window_s
                    while self._leading(None) < first.max_batch:
                        remaining = joined_by - time.monotonic()
                        if remaining <= 0:
                            break
                        self._arrived.wait(remaining)
                batch = [self._waiting.popleft()
                         for _ in range(min(first.max_batch, self._leading(first.group)))]
            asked = [(entry.request, entry.reply) for entry in batch
                     if entry.reply.set_running_or_notify_cancel()]
            if asked:
                self._deliver(asked)

    def _deliver(self, asked: list[tuple[Request, Future[Result]]]) -> None:
        try:
            results = self._answer([request for request, _ in asked])
            if len(results) != len(asked):
                raise RuntimeError(f"{len(results)} answers to {len(asked)} requests")
        except Exception as error:  # every caller of the call gets its failure
            results = [error] * len(asked)
        for (_, reply), result in zip(asked, results, strict=True):
            if isinstance(result, BaseException):
                reply.set_exception(result)
            else:
                reply.set_result(result)
