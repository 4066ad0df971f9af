"""The host's writes and reads of files in the working directory; a path that leads
outside it (`..`, a link the model's code made) is refused."""

from __future__ import annotations

import base64
import os

from .protocol import encode


def inside(workdir: str, path: str) -> str | None:
    """The real path of `path` under the working directory, None outside it."""
    full = os.path.realpath(os.path.join(workdir, path))
    root = os.path.realpath(workdir)
    return full if full == root or full.startswith(root + os.sep) else None


def write(workdir: str, request: dict) -> dict:
    full = inside(workdir, request["path"])
    if full is None:
        return {"error": f"{request['path']!r} leads outside the working directory"}
    try:
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as file:
            file.write(base64.b64decode(request["data"]))
    except OSError as error:
        return {"error": f"cannot write {request['path']!r}: {error}"}
    return {}


def read(workdir: str, request: dict) -> dict:
    full = inside(workdir, request["path"])
    if full is None or not os.path.isfile(full):
        return {"missing": True}
    try:
        with open(full, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            data = file.read(request["max"])
    except OSError:
        return {"missing": True}
    return {"data": encode(data), "size": size, "truncated": size > len(data)}
