"""Batching the model calls of agents that run as plain functions in threads.

Each episode's agent function runs in a thread of its own and calls the endpoint when it
wants a reply. The batcher holds every call until each agent thread still running is
waiting in one, then answers them all with one batched `generate`: the same lockstep as
the built-in agent, however many calls each function makes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from src.language_models.language_model import Generation


@dataclass
class _Call:
    order: int  # the episode's place in the batch: calls are generated in this order
    prompt: list[int]
    result: Generation | None = None
    error: BaseException | None = None


class LockstepBatcher:
    def __init__(self, generate: Callable[[Sequence[Sequence[int]]], list[Generation]]) -> None:
        self._generate = generate
        self._condition = threading.Condition()
        self._waiting: list[_Call] = []
        self._running = 0

    def open(self, agents: int) -> None:
        """`agents` agent threads start now."""
        with self._condition:
            self._running = agents

    def leave(self) -> None:
        """An agent thread has returned: the others need not wait for its calls."""
        with self._condition:
            self._running -= 1
            self._flush_when_all_wait()

    def submit(self, order: int, prompt: list[int]) -> Generation:
        """Called by the endpoint for one agent's call; blocks until the batch is answered.
        Calls are generated in `order`, not in the order the threads happened to arrive, so
        that a seeded batch samples the same tokens for the same episodes every time."""
        call = _Call(order, prompt)
        with self._condition:
            self._waiting.append(call)
            self._flush_when_all_wait()
            while call.result is None and call.error is None:
                self._condition.wait()
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    def _flush_when_all_wait(self) -> None:
        if not self._waiting or len(self._waiting) < self._running:
            return
        calls, self._waiting = sorted(self._waiting, key=lambda call: call.order), []
        try:
            generations = self._generate([call.prompt for call in calls])
            for call, generation in zip(calls, generations, strict=True):
                call.result = generation
        except BaseException as error:  # every waiting call learns of it, none hangs
            for call in calls:
                call.error = error
        self._condition.notify_all()
