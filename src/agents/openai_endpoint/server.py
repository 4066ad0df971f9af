"""An OpenAI-compatible chat-completions endpoint in front of the policy being trained.

`POST /episodes/<key>/v1/chat/completions` answers one call of one episode's agent: the
key names the episode, so the endpoint can keep each episode's token record
(`EpisodeCalls`) and hand the call to the lockstep batcher. Sampling settings are the
assignment's (the trainer scores under the same distribution), not the request's. Beside
OpenAI's fields each response carries, as vLLM does with `return_token_ids`, the exact
`prompt_token_ids` and the choice's `token_ids`.

Tools are rendered by the chat template and tool calls parsed from the reply
(`tool_calls`) where the template renders tools. Refused with status 400 and a message: a
body that is not JSON of Unicode text (a lone surrogate, raw or escaped as \\ud800, is no
text a tokenizer takes), messages not of the OpenAI shape (a role, text or text parts as
content, tool calls of a function name and arguments), `n` other than 1, `stream`,
`stop`, a `tool_choice` that forces a call (that needs constrained decoding), `tools` for
a template that does not render them, messages the template cannot render
(`invalid_request`), a prompt that would not fit the model (`context_length_exceeded`)
and a call that breaks the prefix property (`prefix_broken`).
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from src.agents.openai_endpoint.episode_calls import EpisodeCalls

logger = logging.getLogger(__name__)


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str | dict[str, Any] = "{}"


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["function"] = "function"
    function: _Function


class _TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text"]
    text: str


class _Message(BaseModel):
    """The shape an OpenAI chat message must have before the endpoint reads it (the
    prefix check) and the template renders it; other fields pass to the template."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[_TextPart] | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None


def _message_of_openai_shape(message: dict[str, Any]) -> dict[str, Any]:
    """The message as sent, once it has `_Message`'s shape (ValidationError otherwise)."""
    _Message.model_validate(message)
    return message


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # the SDK sends fields that change nothing here

    model: str
    messages: list[Annotated[dict[str, Any], AfterValidator(_message_of_openai_shape)]]
    n: int = 1
    stream: bool = False
    stop: str | list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False


class EndpointRefusal(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class EpisodeSession:
    """What the endpoint knows of one running episode."""

    key: str
    calls: EpisodeCalls
    order: int = 0  # its place in the current batch
    refusal: EndpointRefusal | None = None  # the last refused call, for the agent to report


Answer = Callable[[EpisodeSession, ChatCompletionRequest], dict[str, Any]]


# a whole conversation with tool results fits many times over; a larger body is an attack
MAX_BODY_BYTES = 16 * 2**20
# Connections served at once beyond one per running episode (each episode's agent waits in
# at most one call: the lockstep holds every call of a round until all have arrived, so the
# run's own batch needs that many). A connection past the cap is answered 503 at once: it
# never gets a thread.
SPARE_CONNECTIONS = 32
_BUSY_BODY = json.dumps({"error": {"message": "too many open connections",
                                    "type": "invalid_request_error", "code": "busy"}}).encode()
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class _Server(ThreadingHTTPServer):
    # every episode of a batch calls at the same moment, each on a connection of its own;
    # the socket server's default listen queue (5) drops the rest, whose clients then read
    # a reset connection
    request_queue_size = 1024
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler],
                 sessions: dict[str, EpisodeSession]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self._sessions = sessions
        self._open = 0
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while fewer than the cap are open; else 503 from
        the listening thread (a short write into an empty socket buffer), and closed."""
        with self._open_lock:
            admitted = self._open < len(self._sessions) + SPARE_CONNECTIONS
            self._open += int(admitted)
        if not admitted:
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass  # the client left: nothing to tell it
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open -= 1


class _DeadlineReader(io.RawIOBase):
    """A connection's bytes, each read waiting only until the request's deadline: a
    request's headers and body, trickled in however slowly, take at most the read
    timeout all told (a socket's own timeout restarts with every byte)."""

    def __init__(self, connection: socket.socket, deadline: Callable[[], float]) -> None:
        self._connection = connection
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._deadline() - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request's read deadline has passed")
        self._connection.settimeout(remaining)
        return self._connection.recv_into(buffer)


class ChatCompletionsEndpoint:
    """Serves on 127.0.0.1 at a free port, in daemon threads, until `close`.

    Any process on the machine can reach 127.0.0.1, so a call must carry this run's
    secret (`Authorization: Bearer <secret>`, the OpenAI client's `api_key`) or it is
    refused (401) before its body is read. A body over `MAX_BODY_BYTES` is refused
    (413) unread; a request (its headers and body, all told) that does not arrive within
    `read_timeout_s` of its first byte being awaited is closed, answered 408 where its
    headers came; JSON nested past the reader's recursion is a bad request (400). At most
    one connection per running episode plus `SPARE_CONNECTIONS` are served at once; one
    past that is answered 503 and closed."""

    def __init__(self, answer: Answer, read_timeout_s: float = 60.0) -> None:
        self.sessions: dict[str, EpisodeSession] = {}
        self.secret = secrets.token_urlsafe(24)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            timeout = read_timeout_s  # the socket's, for writing the answer
            deadline = 0.0  # when the request under way must have been read

            def setup(self) -> None:
                super().setup()
                self.rfile.close()  # the socket's own reader, replaced by one with a deadline
                self.rfile = io.BufferedReader(_DeadlineReader(self.connection,
                                                               lambda: self.deadline))

            def handle_one_request(self) -> None:
                self.deadline = time.monotonic() + read_timeout_s
                super().handle_one_request()

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                if not hmac.compare_digest(self.headers.get("Authorization") or "",
                                           f"Bearer {endpoint.secret}"):
                    return self._reply(401, _error("unauthorized", "this endpoint answers "
                                                   "only its own run's agents"))
                parts = self.path.strip("/").split("/")
                if len(parts) != 5 or parts[0] != "episodes" or parts[2:] != [
                        "v1", "chat", "completions"]:
                    return self._reply(404, _error("not_found", f"no route {self.path}"))
                session = endpoint.sessions.get(parts[1])
                if session is None:
                    return self._reply(404, _error("unknown_episode",
                                                   f"no running episode '{parts[1]}'"))
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if length < 0:  # a negative length would read to the end of the stream
                    self.close_connection = True
                    return self._reply(400, _error("invalid_request", "bad Content-Length"))
                if length > MAX_BODY_BYTES:
                    self.close_connection = True  # the body is not read
                    return self._reply(413, _error("too_large", f"a body of {length} bytes "
                                                   f"(at most {MAX_BODY_BYTES})"))
                try:
                    body = self.rfile.read(length)
                except TimeoutError:
                    self.close_connection = True
                    return self._reply(408, _error("timeout", f"the request did not arrive "
                                                   f"within {read_timeout_s} s"))
                try:
                    request = ChatCompletionRequest.model_validate(_unicode_json(body))
                except (ValueError, ValidationError, RecursionError) as error:
                    return self._reply(400, _error("invalid_request", str(error)[:1000]))
                try:
                    self._reply(200, answer(session, request))
                except EndpointRefusal as refusal:
                    session.refusal = refusal
                    self._reply(400, _error(refusal.code, str(refusal)))
                except Exception as error:  # e.g. the template refuses the messages, the
                    # model failed: the agent's call fails with the reason, the run goes on
                    logger.exception("chat completion for episode %s failed", session.key)
                    self._reply(500, _error("internal_error",
                                            f"{type(error).__name__}: {error}"))

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.connection.settimeout(read_timeout_s)  # the last read left it shorter
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # one line per call would drown the run's log

        self._server = _Server(Handler, self.sessions)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="chat-completions-endpoint")
        self._thread.start()

    def base_url(self, key: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/episodes/{key}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _unicode_json(body: bytes) -> Any:
    """The body's JSON value; ValueError where it is not JSON, or holds a lone surrogate
    (the JSON reader takes one escaped as \\ud800, or encoded raw)."""
    value = json.loads(body or b"null")
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError as error:
        raise ValueError(f"the body holds a lone surrogate ({error.object[error.start]!r}), "
                         "which is not Unicode text") from None
    return value


def check_supported(request: ChatCompletionRequest) -> None:
    for refused, what in ((request.n != 1, "n other than 1 (one call, one reply)"),
                          (request.stream, "stream"), (request.stop is not None, "stop"),
                          (request.tool_choice not in (None, "auto", "none"),
                           f"tool_choice {request.tool_choice!r} (only auto and none)")):
        if refused:
            raise EndpointRefusal("unsupported", f"this endpoint does not support {what}")


def completion_response(session: EpisodeSession, request: ChatCompletionRequest,
                        prompt: list[int], token_ids: list[int], logprobs: list[float],
                        tokens: list[str], message: dict[str, Any],
                        finish_reason: str) -> dict[str, Any]:
    if message.get("tool_calls") and finish_reason == "stop":
        finish_reason = "tool_calls"
    choice: dict[str, Any] = {
        "index": 0, "finish_reason": finish_reason, "token_ids": token_ids,
        "message": message,
        "logprobs": {"content": [
            {"token": token, "logprob": logprob, "bytes": list(token.encode()),
             "top_logprobs": []} for token, logprob in zip(tokens, logprobs, strict=True)]}
        if request.logprobs else None,
    }
    return {"id": f"chatcmpl-{session.key}-{session.calls.calls}", "object": "chat.completion",
            "created": int(time.time()), "model": request.model, "choices": [choice],
            "prompt_token_ids": prompt,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(token_ids),
                      "total_tokens": len(prompt) + len(token_ids)}}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}

