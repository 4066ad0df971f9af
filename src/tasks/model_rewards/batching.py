"""Requests that arrive together, answered by one call: a model's judge chats, a reward
model actor's texts.

Reward functions run in the threads of episode steps: a step that ran past its bound goes
on in its thread beside the next, and a caller may step episodes from several threads, so
requests can arrive together. (The lockstep rollout steps a batch's episodes one after
another: there each request is a call of its own.) A `CallBatcher` has one worker thread:
it takes the first request waiting, waits up to that request's `window_s` for others to
join, and answers up to its `max_batch` of them with one call of `answer`, which returns
each request's result or the exception to raise for it. A caller waits for its own
deadline only (`Future.result(timeout=...)`); a request whose caller gave up before its
call began is dropped. The worker exits when nothing came for `IDLE_S`; the next request
starts it again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

IDLE_S = 1.0  # a worker with nothing to do for this long exits

Request = TypeVar("Request")
Result = TypeVar("Result")


class CallBatcher(Generic[Request, Result]):
    """Requests answered in batches by one worker thread: see the module docstring."""

    def __init__(self, answer: Callable[[list[Request]], list[Result | BaseException]],
                 name: str) -> None:
        self._answer = answer
        self._name = name
        self._waiting: deque[tuple[Request, float, int, Future[Result]]] = deque()
        self._arrived = threading.Condition()
        self._worker: threading.Thread | None = None

    def submit(self, request: Request, window_s: float, max_batch: int) -> Future[Result]:
        """Queue `request`; its future holds its result (or the error). `window_s` and
        `max_batch` rule the batch it leads, if it is the first of one."""
        reply: Future[Result] = Future()
        with self._arrived:
            self._waiting.append((request, window_s, max_batch, reply))
            self._arrived.notify()
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name=self._name,
                                                daemon=True)
                self._worker.start()
        return reply

    def _run(self) -> None:
        while True:
            with self._arrived:
                if not self._arrived.wait_for(lambda: bool(self._waiting), timeout=IDLE_S):
                    self._worker = None  # under the lock: the next submit starts another
                    return
                _, window_s, max_batch, _ = self._waiting[0]
                joined_by = time.monotonic() + window_s
                while len(self._waiting) < max_batch:
                    remaining = joined_by - time.monotonic()
                    if remaining <= 0:
                        break
                    self._arrived.wait(remaining)
                batch = [self._waiting.popleft()
                         for _ in range(min(max_batch, len(self._waiting)))]
            asked = [(request, reply) for request, _, _, reply in batch
                     if reply.set_running_or_notify_cancel()]
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
