"""Where the DB-bench tests find their servers; a server that does not answer skips its tests.

Set DBBENCH_MYSQL_URL / DBBENCH_POSTGRES_URL to point the tests elsewhere.
"""

from __future__ import annotations

import functools
import os

import pytest
from sqlalchemy import create_engine

MYSQL_URL = os.environ.get("DBBENCH_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
POSTGRES_URL = os.environ.get("DBBENCH_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "mysql", "postgresql")


@functools.cache
def unreachable_reason(url: str) -> str | None:
    """None when a connection opens within 3 s, else why not."""
    try:
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect():
            pass
        engine.dispose()
    except Exception as error:  # a missing driver or server alike
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    return None


def server_url(backend: str) -> str:
    """The sandbox URL of a backend, skipping the calling test if its server is down."""
    if backend == "sqlite":
        return "sqlite://"
    url = MYSQL_URL if backend == "mysql" else POSTGRES_URL
    reason = unreachable_reason(url)
    if reason is not None:
        pytest.skip(f"{backend} server unreachable at {url} ({reason})")
    return url
