"""An episode's own random streams: each call into an environment draws from its episode's
streams, whatever another thread's call is doing, and the process's streams stay its own."""

from __future__ import annotations

import random
import threading

import numpy as np

from src.tasks.random_streams import RandomStreams


def draws() -> tuple[list[float], list[int]]:
    """What an environment draws from the global streams, seeding included."""
    return [random.random() for _ in range(3)], list(np.random.randint(0, 1_000, size=3))


def alone(seed: int) -> tuple[list[float], list[int]]:
    python, numpy = random.Random(seed), np.random.RandomState(seed)
    return [python.random() for _ in range(3)], list(numpy.randint(0, 1_000, size=3))


def test_a_hung_call_holds_up_no_other_episode_and_draws_only_its_own() -> None:
    # a call that never returns (here: until released) in one thread, as an environment
    # left behind at its step timeout is; another episode's calls go on at once, each
    # thread drawing from its own episode's streams, and the process's streams move only
    # by the process's own draws
    random.seed(11)
    np.random.seed(11)
    hung, other = RandomStreams(1), RandomStreams(2)
    entered, release = threading.Event(), threading.Event()
    seen: dict[str, tuple[list[float], list[int]]] = {}

    def hung_call() -> None:
        with hung.active():
            entered.set()
            release.wait(30)
            seen["hung"] = draws()

    def other_calls() -> None:
        with other.active():
            seen["other"] = draws()

    hanging = threading.Thread(target=hung_call, daemon=True)
    hanging.start()
    assert entered.wait(10)
    going_on = threading.Thread(target=other_calls, daemon=True)
    going_on.start()
    going_on.join(5)
    assert not going_on.is_alive(), "another episode's call waited for the hung one"
    assert seen["other"] == alone(2)
    process = draws()
    release.set()
    hanging.join(10)
    assert seen["hung"] == alone(1)
    random.seed(11)
    np.random.seed(11)
    assert process == draws()


def test_draws_carry_over_between_calls_and_seeding_stays_inside() -> None:
    streams = RandomStreams(3)
    with streams.active():
        first = random.random()
    with streams.active():
        second = random.random()
        np.random.seed(5)  # an environment seeding the global streams seeds its own
        random.seed(5)
    python = random.Random(3)
    assert [first, second] == [python.random(), python.random()]
    random.seed(8)
    before = random.random()
    random.seed(8)
    with streams.active():
        assert random.random() == random.Random(5).random()
        assert np.random.randint(1_000) == np.random.RandomState(5).randint(1_000)
    assert random.random() == before
