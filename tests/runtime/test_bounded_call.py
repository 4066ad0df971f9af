"""Bounded calls: a call that runs past its bound is stopped (its worker process killed
and replaced) and reported, whatever the code does; values, exceptions and nested calls
come back as from a plain call; loading a function is not charged to its first call."""

from __future__ import annotations

import os
import time

import pytest

from src.runtime.bounded_call import BoundedFunction, BoundExceeded, worker_pid


def spin(seconds: float) -> int:
    """A pure-Python loop: no signal or thread can stop it from inside the process."""
    count = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        count += 1
    return count


def power_tower() -> int:
    return 9 ** 9 ** 9 ** 9  # one C call, for ever


def divide(numerator: float, denominator: float = 1.0) -> float:
    return numerator / denominator


class SlowToLoad:
    """Sets itself up when unpickled in the worker (as a dataset drawn again would)."""

    __name__ = "slow_to_load"

    def __init__(self, setup_s: float) -> None:
        self.setup_s = setup_s

    def __setstate__(self, state: dict[str, float]) -> None:
        self.__dict__.update(state)
        spin(self.setup_s)

    def __call__(self) -> str:
        return "ready"


BOUNDED_DIVIDE = BoundedFunction(divide)


def nested(numerator: float) -> float:
    return BOUNDED_DIVIDE(numerator, 4.0)


def test_values_and_exceptions_come_back_as_from_a_plain_call() -> None:
    assert BOUNDED_DIVIDE(3.0, denominator=2.0) == 1.5
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        BOUNDED_DIVIDE(1.0, 0.0)
    assert BOUNDED_DIVIDE(1.0) == 1.0  # the worker carries on after an exception
    assert BoundedFunction(nested)(2.0) == 0.5  # in the worker, a bounded call runs in place


@pytest.mark.parametrize("function, args", [(spin, (60.0,)), (power_tower, ())])
def test_an_overrun_is_stopped_at_its_bound_and_the_worker_replaced(function, args) -> None:
    BOUNDED_DIVIDE(1.0)
    before = worker_pid()
    started = time.monotonic()
    with pytest.raises(BoundExceeded, match="ran past 1 s"):
        BoundedFunction(function)(*args, timeout_s=1.0)
    assert time.monotonic() - started < 10.0
    with pytest.raises(ProcessLookupError):  # killed and reaped: nothing left spinning
        os.kill(before, 0)
    assert BOUNDED_DIVIDE(6.0, 3.0) == 2.0 and worker_pid() != before


def test_loading_a_function_is_not_charged_to_its_call() -> None:
    assert BoundedFunction(SlowToLoad(2.0))(timeout_s=0.5) == "ready"


def test_a_function_that_cannot_cross_is_refused_when_wrapped() -> None:
    def local(reply: str) -> float:
        return 0.0

    with pytest.raises(ValueError, match="'local' cannot be sent .* module level"):
        BoundedFunction(local)


def megabytes(count: int) -> bytes:
    return bytes(count * 2**20)


def test_a_large_value_comes_back_in_time_linear_in_its_size() -> None:
    # the reply arrives in pipe-sized chunks: joined one by one into bytes, 64 MB took
    # about 30 s (each chunk copied all that came before it)
    bounded = BoundedFunction(megabytes)
    bounded.start()
    started = time.monotonic()
    assert len(bounded(64, timeout_s=10.0)) == 64 * 2**20
    assert time.monotonic() - started < 10.0


def allocate(megabytes: int) -> int:
    return len(bytearray(megabytes * 2**20))


def test_a_call_that_asks_for_more_memory_than_its_bound_raises_and_the_worker_goes_on(
        ) -> None:
    bounded = BoundedFunction(allocate)
    with pytest.raises(MemoryError):
        bounded(2048, timeout_s=30.0)  # 2 GiB: past the 512 MiB a call may add
    assert bounded(64, timeout_s=30.0) == 64 * 2**20  # the next call runs as before
