"""Bounded calls: a call that runs past its bound is stopped (its worker process killed
and replaced) and reported, whatever the code does; values, exceptions and nested calls
come back as from a plain call; loading a function is not charged to its first call."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from src.sandboxes.bounded_call import (
    BoundedFunction,
    BoundExceeded,
    ScorerUnavailable,
    stop_worker,
    worker_pid,
)


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


class LargeToLoad:
    """Maps a large buffer as it is loaded in the worker (as importing a library does)."""

    __name__ = "large_to_load"

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__dict__.update(state)
        self.size = len(bytearray(self.megabytes * 2**20))

    def __init__(self, megabytes: int) -> None:
        self.megabytes = megabytes

    def __call__(self) -> int:
        return self.size


def test_the_memory_bound_of_a_call_ends_with_it() -> None:
    # a call's bound left in place made the next function's load fail under it
    assert BoundedFunction(allocate)(1, timeout_s=30.0) == 2**20
    assert BoundedFunction(LargeToLoad(768))(timeout_s=30.0) == 768 * 2**20


class BrokenOnLoad:
    """Cannot be set up in the worker (as a scorer whose module fails to import there)."""

    __name__ = "broken_on_load"

    def __init__(self) -> None:
        self.module = "missing_dependency"  # pickle sets up only an object with state

    def __setstate__(self, state: dict[str, Any]) -> None:
        raise ImportError(f"no module named '{state['module']}'")

    def __call__(self) -> float:
        return 1.0


def test_a_function_the_worker_cannot_load_is_the_hosts_failure() -> None:
    with pytest.raises(ScorerUnavailable, match="could not load 'broken_on_load'.*"
                                                "missing_dependency"):
        BoundedFunction(BrokenOnLoad())()
    assert BOUNDED_DIVIDE(1.0, 2.0) == 0.5


def write_file(path: str) -> str:
    """What a reply evaluated as Python may try: write a host file."""
    try:
        with open(path, "w") as target:
            target.write("escaped")
    except OSError as error:
        return type(error).__name__
    return "written"


def connect(port: int) -> str:
    """... or reach a service of the host."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
    except OSError as error:
        return type(error).__name__
    return "connected"


def identity() -> tuple[int, list[str], bool]:
    return os.getuid(), sorted(os.environ), os.access("/tmp", os.W_OK)


def test_the_worker_is_isolated_from_the_hosts_files_network_and_privileges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stop_worker()  # the next starts with this environment
    monkeypatch.setenv("SECRET_TOKEN", "not for the worker")
    target = tmp_path / "escaped.txt"
    assert BoundedFunction(write_file)(str(target)) in ("OSError", "PermissionError",
                                                        "FileNotFoundError")
    assert not target.exists()
    here = Path(__file__).resolve()  # the scorers' own folders are there, read-only
    assert BoundedFunction(write_file)(str(here.with_name("escaped.txt"))) == "OSError"
    assert not here.with_name("escaped.txt").exists()
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        assert BoundedFunction(connect)(listener.getsockname()[1]) == "ConnectionRefusedError"
    uid, variables, tmp_writable = BoundedFunction(identity)()
    assert uid != 0 and tmp_writable
    assert "SECRET_TOKEN" not in variables and "HOME" in variables


def test_an_unknown_isolation_choice_is_refused_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stop_worker()
    monkeypatch.setenv("AGENT_RL_SCORER_SANDBOX", "docker")
    with pytest.raises(ScorerUnavailable, match="AGENT_RL_SCORER_SANDBOX='docker'"):
        BOUNDED_DIVIDE(1.0)
    monkeypatch.undo()
    assert BOUNDED_DIVIDE(1.0) == 1.0


def test_a_scorer_in_a_folder_below_tmp_is_found_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the worker's own /tmp is private: a checkout under the host's /tmp is mounted over it
    tmp_path.chmod(0o755)  # as a checkout is: the worker runs as another user
    (tmp_path / "scorer_below_tmp.py").write_text(
        "import os\n\ndef where():\n    return __file__, os.access(__file__, os.W_OK)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stop_worker()  # the next starts with this search path
    from scorer_below_tmp import where  # type: ignore[import-not-found]

    assert BoundedFunction(where)() == (str(tmp_path / "scorer_below_tmp.py"), False)
    stop_worker()


def read_text(path: str) -> str:
    with open(path) as source:
        return source.read()


def test_a_file_the_function_names_is_read_in_a_worker_that_sees_it(tmp_path: Path) -> None:
    data = tmp_path / "rules.txt"  # below a folder only its owner may enter
    data.write_text("score by the rules")
    with pytest.raises(FileNotFoundError):
        BoundedFunction(read_text)(str(data))
    named = BoundedFunction(read_text, read_paths=[str(data)])
    assert named(str(data)) == "score by the rules"
    assert BOUNDED_DIVIDE(1.0, 4.0) == 0.25  # the new worker serves every function
