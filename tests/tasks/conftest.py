"""Fixtures of the task tests: a scripted judge server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.tasks.model_rewards.judge_server import Answer, JudgeServer


@pytest.fixture
def serve() -> Iterator[Callable[..., JudgeServer]]:
    """Starts a server whose answers are given in turn (the last one kept), or by a
    function of the request."""
    servers: list[JudgeServer] = []

    def start(*answers: Answer, by: Callable[[dict[str, Any]], Answer] | None = None
              ) -> JudgeServer:
        queue = list(answers)
        server = JudgeServer(by or (lambda _: queue.pop(0) if len(queue) > 1 else queue[0]))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
