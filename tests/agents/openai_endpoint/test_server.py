"""The endpoint answers malformed requests and failing calls with a status and a reason."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

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
