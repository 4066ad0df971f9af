"""Cutting rows into micro-batches whose padded size fits a token budget."""

from __future__ import annotations

from collections.abc import Sequence

from src.language_models.shared_prefix import plan_packs, split_pack


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


def split_packs_by_token_budget(rows: Sequence[int], sequences: Sequence[Sequence[int]],
                                max_tokens: int | None) -> list[list[int]]:
    """Micro-batches for a model that packs rows sharing a prefix: the rows regrouped into
    packs (src.language_models.shared_prefix), a pack cut where it alone exceeds the
    budget, and runs of packs whose padded packed size (packs x longest pack) stays
    within `max_tokens`. `sequences[row]` are the row's tokens."""
    own = [sequences[row] for row in rows]
    lengths = [len(sequence) for sequence in own]
    packs = plan_packs(own)
    if max_tokens is not None:
        packs = [part for pack in packs for part in split_pack(pack, lengths, max_tokens)]
    runs = split_by_token_budget(range(len(packs)), [pack.length(lengths) for pack in packs],
                                 max_tokens)
    return [[rows[index] for pack in run for index in packs[pack].rows] for run in runs]
