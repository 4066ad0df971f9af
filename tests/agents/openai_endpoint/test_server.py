"""The endpoint answers malformed requests and failing calls with a status and a reason."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from src.agents.openai_endpoint.episode_calls import EpisodeCalls
from src.agents.openai_endpoint.server import ChatCompletionsEndpoint, EpisodeSession
from src.records.trajectory import Trajectory


def failing_answer(session, request):
    raise RuntimeError("the template refuses these messages")


@pytest.fixture
def endpoint():
    served = ChatCompletionsEndpoint(failing_answer)
    served.sessions["k"] = EpisodeSession("k", EpisodeCalls(Trajectory(), None))
    yield served
    served.close()


def post(url: str, body: bytes) -> tuple[int, str]:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"))
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())["error"]["message"]
    return 200, ""


@pytest.mark.parametrize(("body", "status", "reason"), [
    (b"not json", 400, "Expecting value"),
    (b'{"model": 1, "messages": []}', 400, "validation error"),
    (b'{"model": "m", "messages": []}', 500, "RuntimeError: the template refuses"),
])
def test_bad_requests_and_failing_calls_get_a_status_and_a_reason(
        endpoint, body: bytes, status: int, reason: str) -> None:
    code, message = post(endpoint.base_url("k") + "/chat/completions", body)
    assert code == status and reason in message


def test_unknown_episodes_and_routes_are_404(endpoint) -> None:
    assert post(endpoint.base_url("other") + "/chat/completions", b"{}")[0] == 404
    assert post(endpoint.base_url("k") + "/completions", b"{}")[0] == 404


def test_every_episode_of_a_batch_connecting_at_once_is_answered() -> None:
    # a batch's agents (or a verifiers environment's rollouts) call at the same moment,
    # each on a connection of its own: none may be dropped from the listen queue
    def slow_answer(session, request):
        time.sleep(0.2)
        return {"episode": session.key}

    served = ChatCompletionsEndpoint(slow_answer)
    keys = [f"e{index}" for index in range(96)]
    for key in keys:
        served.sessions[key] = EpisodeSession(key, EpisodeCalls(Trajectory(), None))

    def call(key: str) -> str:
        request = urllib.request.Request(served.base_url(key) + "/chat/completions",
                                         data=b'{"model": "m", "messages": []}',
                                         method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["episode"]

    try:
        with ThreadPoolExecutor(max_workers=len(keys)) as pool:
            assert list(pool.map(call, keys)) == keys
    finally:
        served.close()
