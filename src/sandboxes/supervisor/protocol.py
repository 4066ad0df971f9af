"""The wire to the host: requests come as JSON lines on stdin, answers go as JSON lines to
stdout, bytes in base64."""

from __future__ import annotations

import base64
import json
import sys

HOST = 0  # the host's requests come on stdin
CHUNK = 65536


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def reply(answer: dict) -> None:
    sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
    sys.stdout.buffer.flush()
