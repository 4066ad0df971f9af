import threading
import time

import pytest

from src.run.worker_thread import CallAbandoned, WorkerThread


def _spin() -> None:
    while True:  # a pure-Python loop that never returns
        pass


def test_an_interrupted_spinning_call_ends_its_thread() -> None:
    worker = WorkerThread("spinning")
    future = worker.submit(_spin)
    time.sleep(0.2)
    worker.interrupt()
    with pytest.raises(CallAbandoned):
        future.result(timeout=5)
    deadline = time.monotonic() + 5
    while worker.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not worker.alive


def test_an_interrupted_blocked_call_ends_once_the_block_returns() -> None:
    release = threading.Event()
    worker = WorkerThread("blocked")
    future = worker.submit(lambda: release.wait(30))
    time.sleep(0.1)
    worker.interrupt()
    assert worker.alive  # blocked in C code: the exception waits for it to return
    release.set()
    with pytest.raises(CallAbandoned):
        future.result(timeout=5)


def test_calls_run_in_order_until_stopped() -> None:
    worker = WorkerThread("ordered")
    futures = [worker.submit(lambda n=n: n * n) for n in range(5)]
    worker.stop()
    assert [future.result(timeout=5) for future in futures] == [0, 1, 4, 9, 16]
