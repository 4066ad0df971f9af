"""Cutting rows into micro-batches whose padded size fits a token budget."""

from __future__ import annotations

from collections.abc import Sequence


def split_by_token_budget(rows: Sequence[int], lengths: Sequence[int],
                          max_tokens: int | None) -> list[list[int]]:
    """Consecutive runs of `rows` whose padded size (rows x longest row, by `lengths[row]`)
    stays within `max_tokens`; a row longer than the budget goes alone. Activation memory
    grows with the padded size, and a loss summed over micro-batches is the same however
    the rows are split."""
    if max_tokens is None:
        return [list(rows)]
    micro_batches: list[list[int]] = []
    current: list[int] = []
    width = 0  # the longest row of `current`
    for row in rows:
        width = max(width, lengths[row])
        if current and (len(current) + 1) * width > max_tokens:
            micro_batches.append(current)
            current, width = [], lengths[row]
        current.append(row)
    micro_batches.append(current)
    return micro_batches
