"""The endpoint answers malformed requests and failing calls with a status and a reason,
only its own run's agents, and no request that would hold or flood it."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from src.agents.openai_endpoint.episode_calls import EpisodeCalls
from src.agents.openai_endpoint.server import (
    MAX_BODY_BYTES,
    SPARE_CONNECTIONS,
    ChatCompletionsEndpoint,
    EpisodeSession,
)
from src.records.trajectory import Trajectory


def failing_answer(session, request):
    raise RuntimeError("the template refuses these messages")


@pytest.fixture
def endpoint():
    served = ChatCompletionsEndpoint(failing_answer)
    served.sessions["k"] = EpisodeSession("k", EpisodeCalls(Trajectory(), None))
    yield served
    served.close()


def post(url: str, body: bytes, secret: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST",
                                                      headers=headers))
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
    code, message = post(endpoint.base_url("k") + "/chat/completions", body, endpoint.secret)
    assert code == status and reason in message


def chat(*messages: dict) -> bytes:
    return json.dumps({"model": "m", "messages": list(messages)}).encode()


@pytest.mark.parametrize(("body", "reason"), [
    (chat({"role": "user", "content": "\ud800"}), "lone surrogate"),
    (chat({"role": "user", "content": "\ud800"}).replace(b"\\ud800", b"\xed\xa0\x80"),
     "lone surrogate"),
    (chat({"role": 5, "content": "hi"}), "role"),
    (chat({"role": "user", "content": {"a": 1}}), "content"),
    (chat({"role": "user", "content": [1, 2]}), "content"),
    (chat({"role": "assistant", "content": "x", "tool_calls": "abc"},
          {"role": "user", "content": "hi"}), "tool_calls"),
    (chat({"role": "assistant", "content": "x", "tool_calls": [{"function": 5}]},
          {"role": "user", "content": "hi"}), "tool_calls"),
], ids=["escaped surrogate", "encoded surrogate", "role a number", "content an object",
        "content numbers", "tool_calls text", "tool_calls of a number"])
def test_messages_that_are_not_openai_messages_of_text_are_bad_requests(
        endpoint, body: bytes, reason: str) -> None:
    code, message = post(endpoint.base_url("k") + "/chat/completions", body, endpoint.secret)
    assert code == 400 and reason in message


def test_unknown_episodes_and_routes_are_404(endpoint) -> None:
    assert post(endpoint.base_url("other") + "/chat/completions", b"{}",
                endpoint.secret)[0] == 404
    assert post(endpoint.base_url("k") + "/completions", b"{}", endpoint.secret)[0] == 404


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
                                         method="POST",
                                         headers={"Authorization": f"Bearer {served.secret}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["episode"]

    try:
        with ThreadPoolExecutor(max_workers=len(keys)) as pool:
            assert list(pool.map(call, keys)) == keys
    finally:
        served.close()


def test_a_call_without_the_runs_secret_is_refused_unread() -> None:
    answered = []
    served = ChatCompletionsEndpoint(lambda session, request: answered.append(1) or {})
    served.sessions["k"] = EpisodeSession("k", EpisodeCalls(Trajectory(), None))
    try:
        url = served.base_url("k") + "/chat/completions"
        body = b'{"model": "m", "messages": []}'
        assert post(url, body, None)[0] == 401
        assert post(url, body, "a guess")[0] == 401
        assert answered == []
        assert post(url, body, served.secret) == (200, "")
    finally:
        served.close()


def raw_call(served: ChatCompletionsEndpoint, headers: dict[str, str], body: bytes,
             timeout_s: float = 10.0) -> bytes:
    """What the endpoint sends back on a connection given these headers and body (b""
    where it closes the connection without an answer)."""
    host, port = served.base_url("k").split("/")[2].split(":")
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
        connection.sendall(f"POST /episodes/k/v1/chat/completions HTTP/1.1\r\n"
                           f"Host: x\r\n{head}\r\n".encode() + body)
        return connection.recv(4096)


def test_a_body_too_large_a_stalled_body_and_deep_json_are_answered_and_bounded(
        endpoint) -> None:
    auth = {"Authorization": f"Bearer {endpoint.secret}"}
    huge = raw_call(endpoint, {**auth, "Content-Length": str(MAX_BODY_BYTES + 1)}, b"{")
    assert huge.startswith(b"HTTP/1.0 413")
    deep = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"}"
    assert raw_call(endpoint, {**auth, "Content-Length": str(len(deep))},
                    deep).startswith(b"HTTP/1.0 400")
    # a negative length would read to the end of the stream, past the cap
    assert raw_call(endpoint, {**auth, "Content-Length": "-1"}, b"{}").startswith(
        b"HTTP/1.0 400")
    # a body shorter than it says: answered 408 once the read times out, then closed
    quick = ChatCompletionsEndpoint(failing_answer, read_timeout_s=0.5)
    quick.sessions["k"] = EpisodeSession("k", EpisodeCalls(Trajectory(), None))
    try:
        started = time.monotonic()
        assert raw_call(quick, {"Authorization": f"Bearer {quick.secret}",
                                "Content-Length": "1000"}, b"{").startswith(b"HTTP/1.0 408")
        assert time.monotonic() - started < 5.0
    finally:
        quick.close()


def open_connection(served: ChatCompletionsEndpoint, timeout_s: float = 10.0) -> socket.socket:
    host, port = served.base_url("k").split("/")[2].split(":")
    return socket.create_connection((host, int(port)), timeout=timeout_s)


def answer_within(connection: socket.socket, seconds: float, trickle: bytes = b"") -> bytes:
    """What the endpoint answers within `seconds` while `trickle` is sent a byte every
    0.1 s (each read far inside the read timeout); b"" where it closed without an answer,
    None where it has not answered yet."""
    connection.settimeout(0.1)
    ends = time.monotonic() + seconds
    for byte in [trickle[index:index + 1] for index in range(len(trickle))] or [b""]:
        with contextlib.suppress(OSError):  # closed by the endpoint: its answer is read
            connection.sendall(byte)
        try:
            return connection.recv(4096)
        except TimeoutError:
            if time.monotonic() > ends:
                return None
    connection.settimeout(max(ends - time.monotonic(), 0.01))
    try:
        return connection.recv(4096)
    except TimeoutError:
        return None


def test_a_request_trickled_in_slower_than_the_bound_is_cut_at_its_deadline() -> None:
    # each byte comes well inside the read timeout; the request as a whole does not
    quick = ChatCompletionsEndpoint(failing_answer, read_timeout_s=1.0)
    quick.sessions["k"] = EpisodeSession("k", EpisodeCalls(Trajectory(), None))
    head = (f"POST /episodes/k/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {quick.secret}\r\nContent-Length: 1000\r\n\r\n").encode()
    try:
        with open_connection(quick) as connection:  # the body
            connection.sendall(head)
            started = time.monotonic()
            answer = answer_within(connection, 4.0, trickle=b"{" * 60)
            assert answer is not None and answer.startswith(b"HTTP/1.0 408"), answer
            assert time.monotonic() - started < 2.0
        with open_connection(quick) as connection:  # the headers
            started = time.monotonic()
            assert answer_within(connection, 4.0, trickle=head[:60]) == b""
            assert time.monotonic() - started < 2.0
    finally:
        quick.close()


def test_idle_connections_past_the_cap_are_refused_and_hold_no_thread() -> None:
    served = ChatCompletionsEndpoint(failing_answer, read_timeout_s=2.0)
    served.sessions["k"] = EpisodeSession("k", EpisodeCalls(Trajectory(), None))
    threads_before = threading.active_count()
    idle: list[socket.socket] = []
    try:
        for _ in range(500):  # connect and send nothing
            idle.append(open_connection(served))
        time.sleep(0.5)  # the endpoint has taken every connection from the listen queue
        # one running episode: its connection and the spare ones get a thread, no more
        held = threading.active_count() - threads_before
        assert held <= 1 + SPARE_CONNECTIONS
        refused = [answer_within(connection, 0.2) for connection in idle]
        assert sum(1 for answer in refused if answer and answer.startswith(
            b"HTTP/1.0 503")) >= 500 - (1 + SPARE_CONNECTIONS)
        time.sleep(2.5)  # the idle ones that got a thread are cut at their deadline
        code, message = post(served.base_url("k") + "/chat/completions",
                             b'{"model": "m", "messages": []}', served.secret)
        assert (code, message) == (500, "RuntimeError: the template refuses these messages")
    finally:
        for connection in idle:
            connection.close()
        served.close()
