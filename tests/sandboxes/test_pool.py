"""The warm pool on the real sandbox: N opened in parallel, all closed on every path,
those an episode dropped unclosed included."""

from __future__ import annotations

import gc
import time
import weakref

import psutil
import pytest

from src.sandboxes.backends import open_backend
from src.sandboxes.pool import SandboxPool
from src.sandboxes.settings import SandboxSettings
from tests.sandboxes.processes import sandbox_processes


def test_the_pool_opens_sandboxes_in_parallel_and_closes_all() -> None:
    backend = open_backend(SandboxSettings())
    with SandboxPool(backend, size=4, parallelism=4) as pool:
        sandboxes = [pool.acquire({"id.txt": str(number)}) for number in range(4)]
        assert [sandbox.run("cat id.txt").stdout for sandbox in sandboxes] == \
            ["0", "1", "2", "3"]
        assert len({sandbox.id for sandbox in sandboxes}) == 4
        sandboxes[0].close()  # an episode's own close; the pool closes the rest
        time.sleep(0.5)  # the replacements start meanwhile
        inside = sandbox_processes()
        assert len(inside) >= 4
    _, alive = psutil.wait_procs(inside, timeout=5)
    assert alive == [] and sandbox_processes() == []
    assert not any(sandbox.alive for sandbox in sandboxes)


def test_an_error_in_the_block_closes_every_sandbox() -> None:
    with pytest.raises(KeyboardInterrupt), \
            SandboxPool(open_backend(SandboxSettings()), size=2) as pool:
        sandbox = pool.acquire()
        raise KeyboardInterrupt
    assert not sandbox.alive
    _, alive = psutil.wait_procs(sandbox_processes(), timeout=5)
    assert alive == []


def test_a_sandbox_whose_episode_dropped_it_unclosed_is_closed_by_the_pool() -> None:
    # an episode dropped without its close (a crashed worker, a lost reference): the pool
    # still holds its sandbox, and closes it with the rest
    pool = SandboxPool(open_backend(SandboxSettings()), size=0)
    pool.acquire()
    gc.collect()
    assert len(sandbox_processes()) >= 1
    pool.close()
    _, alive = psutil.wait_procs(sandbox_processes(), timeout=5)
    assert alive == [] and sandbox_processes() == []


def test_a_sandbox_closed_by_its_episode_is_let_go_by_the_pool() -> None:
    with SandboxPool(open_backend(SandboxSettings()), size=0) as pool:
        first = pool.acquire()
        first.close()
        second = pool.acquire()  # the pool forgets the closed one as it hands out the next
        reference = weakref.ref(first)
        del first
        gc.collect()
        assert reference() is None and second.alive
