"""Evenly spaced picks: the episodes a run shows of an evaluation or a batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def spread(items: Sequence[T], count: int) -> list[T]:
    """At most `count` items at evenly spaced positions, the first and the last among them:
    an evaluation's (in sample order) are the same problems at every step, a batch's cover
    its groups."""
    if len(items) <= count or count <= 1:
        return list(items[:count])
    step = (len(items) - 1) / (count - 1)
    return [items[round(index * step)] for index in range(count)]
