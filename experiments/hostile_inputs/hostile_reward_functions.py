"""Reward functions for a rubric that misbehave, one way each, for the scorer study
(experiments/hostile_inputs/fuzz_scorers.py): a module of their own, so that the scoring
worker imports them by this name (a study run as a script is `__main__` there)."""

from __future__ import annotations

import math
import os
import time

from src.tasks.reward_functions import DetailedReward

ALLOCATED_MB = 1_536  # what the allocating function takes, once a call

_LEAKED: list[bytes] = []


def hangs(reply: str) -> float:
    time.sleep(3_600)
    return 1.0


def spins(reply: str) -> float:
    while True:
        pass


def raises(reply: str) -> float:
    return float(int(reply))  # raises on most replies, and past 4,300 digits


def exits(reply: str) -> float:
    raise SystemExit(3)  # not an Exception: out of the worker's loop


def ends_process(reply: str) -> float:
    os._exit(7)


def returns_nan(reply: str) -> float:
    return float("nan")


def returns_infinity(reply: str) -> float:
    return -math.inf


def returns_huge_integer(reply: str) -> float:
    return 10**400  # type: ignore[return-value]


def returns_text(reply: str) -> float:
    return "1.0"  # type: ignore[return-value]


def returns_nan_detail(reply: str) -> DetailedReward:
    return DetailedReward(1.0, {"confidence": float("nan")})


def returns_unpicklable(reply: str) -> float:
    return lambda: 1.0  # type: ignore[return-value]


def returns_large_list(reply: str) -> float:
    return [0.5] * 10**6  # type: ignore[return-value]  # 9 MB as a pickle


def allocates(reply: str) -> float:
    block = bytearray(ALLOCATED_MB * 2**20)
    return float(len(block) > 0)


def leaks(reply: str) -> float:
    """Keeps 8 MB a call in the worker, up to 512 MB."""
    if len(_LEAKED) < 64:
        _LEAKED.append(bytes(8 * 2**20))
    return 1.0


def sound(reply: str) -> float:
    return float(reply.strip() == "4")


HOSTILE_FUNCTIONS = (hangs, spins, raises, exits, ends_process, returns_nan,
                     returns_infinity, returns_huge_integer, returns_text, returns_nan_detail,
                     returns_unpicklable, returns_large_list, allocates, leaks, sound)
# each call costs a bound, a worker's end and a restart, or a big allocation
SLOW = frozenset({"hangs", "spins", "exits", "ends_process", "allocates"})
