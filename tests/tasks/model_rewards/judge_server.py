"""A scripted judge: a real HTTP server in the test's process that speaks the OpenAI
chat-completions protocol, answering each request as the test says."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = "hang"  # an answer: the server keeps the request until the test ends
GARBLED = "garbled"  # an answer: HTTP 200 whose body is no JSON

# what the server answers one request: a verdict's text, an HTTP status, HANG or GARBLED
Answer = str | int


class JudgeServer:
    """A chat-completions server on 127.0.0.1 in daemon threads. `answer(request)` says
    what each request gets; every request's body and Authorization header is kept."""

    def __init__(self, answer: Callable[[dict[str, Any]], Answer]) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str | None] = []
        self.released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                owner.keys.append(self.headers.get("Authorization"))
                answer = owner.answer(body)
                if answer == HANG:
                    owner.released.wait(30.0)
                    return
                if answer == GARBLED:
                    self.send(200, b"<html>a proxy's error page</html>", "text/html")
                elif isinstance(answer, int):
                    self.send(answer, json.dumps({"error": {
                        "message": f"status {answer}", "type": "server_error"}}).encode())
                else:
                    self.send(200, json.dumps(completion(body["model"], answer)).encode())

            def send(self, status: int, payload: bytes,
                     kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def completion(model: str, text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
