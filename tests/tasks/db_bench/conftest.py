"""Fixtures of the DB-bench tests: each backend in turn, skipped where its server is down."""

from __future__ import annotations

import pytest

from tests.tasks.db_bench.servers import BACKENDS, server_url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sandbox_url(backend: str) -> str:
    return server_url(backend)
