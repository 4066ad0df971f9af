"""Shared-prefix packing: rows that begin with the same tokens are run as one sequence.

The G completions of a GRPO group share their prompt, which is most of every row (about
80% of the tokens trained on the quickstart). A pack lays the shared prefix out once,
followed by each row's own suffix:

    [prefix 0..s-1][suffix of row a: s..len_a-1][suffix of row b: s..len_b-1]...

with positions continuing from s in every suffix, and an attention mask that lets each
suffix see the prefix and itself (causally), never another suffix. Every token then has
exactly the context it has in its own row, so its hidden state, log-prob and gradient
are those of the plain path; the prefix is computed once and its gradient is the sum of
what all rows send back through it, which is what the plain path adds up too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

MIN_SHARED_TOKENS = 16  # below this, a separate row costs about what packing saves


@dataclass(frozen=True)
class Pack:
    """Rows (batch indices) run as one sequence; the first `shared` tokens of each are
    identical and laid out once."""

    rows: tuple[int, ...]
    shared: int

    def length(self, lengths: Sequence[int]) -> int:
        """Tokens in the packed sequence."""
        return self.shared + sum(lengths[row] - self.shared for row in self.rows)


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    limit = min(len(a), len(b))
    index = 0
    while index < limit and a[index] == b[index]:
        index += 1
    return index


def plan_packs(sequences: Sequence[Sequence[int]],
               min_shared: int = MIN_SHARED_TOKENS) -> list[Pack]:
    """Rows grouped into packs, in an order that puts rows with common prefixes together
    (lexicographic); a row sharing fewer than `min_shared` tokens with its neighbours is
    a pack of its own (shared 0)."""
    order = sorted(range(len(sequences)), key=lambda row: list(sequences[row]))
    packs: list[Pack] = []
    current: list[int] = []
    shared = 0
    for row in order:
        if current:
            common = min(shared, _common_length(sequences[current[0]], sequences[row]))
            if common >= min_shared:
                current.append(row)
                shared = common
                continue
            packs.append(Pack(tuple(current), shared if len(current) > 1 else 0))
        current, shared = [row], len(sequences[row])
    if current:
        packs.append(Pack(tuple(current), shared if len(current) > 1 else 0))
    return packs


def split_pack(pack: Pack, lengths: Sequence[int], max_tokens: int) -> list[Pack]:
    """The pack cut into consecutive packs of the same prefix, each within `max_tokens`
    packed tokens where it can be (a single row longer than that goes alone)."""
    parts: list[Pack] = []
    current: list[int] = []
    for row in pack.rows:
        candidate = Pack((*current, row), pack.shared)
        if current and candidate.length(lengths) > max_tokens:
            parts.append(Pack(tuple(current), pack.shared if len(current) > 1 else 0))
            current = [row]
        else:
            current.append(row)
    parts.append(Pack(tuple(current), pack.shared if len(current) > 1 else 0))
    return parts


@dataclass
class PackedBatch:
    """Packs as right-padded rows, ready for a decoder forward.

    `input_ids`, `position_ids` [packs, width]; `attention` [packs, 1, width, width] bool
    (True: may attend). Per original row [rows]: its pack, the column of its first suffix
    token and its pack's shared length.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention: torch.Tensor
    pack_of_row: torch.Tensor
    offset_of_row: torch.Tensor
    shared_of_row: torch.Tensor

    def locate(self, rows: torch.Tensor, positions: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(pack, column) of token `positions[i]` of row `rows[i]`."""
        shared = self.shared_of_row[rows]
        columns = torch.where(positions < shared, positions,
                              positions - shared + self.offset_of_row[rows])
        return self.pack_of_row[rows], columns


def pack_rows(input_ids: torch.Tensor, lengths: Sequence[int], packs: Sequence[Pack],
              pad_id: int) -> PackedBatch:
    """Lay out `packs` of the right-padded rows `input_ids` (each row `lengths[row]` long)."""
    widths = [pack.length(lengths) for pack in packs]
    width = max(widths)
    ids = torch.full((len(packs), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(packs), width), dtype=torch.long)
    attention = torch.zeros((len(packs), 1, width, width), dtype=torch.bool)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    pack_of_row, offset_of_row, shared_of_row = (
        torch.zeros(input_ids.shape[0], dtype=torch.long) for _ in range(3))
    for index, pack in enumerate(packs):
        shared = pack.shared
        first = pack.rows[0]
        ids[index, :shared] = input_ids[first, :shared]
        positions[index, :shared] = torch.arange(shared)
        attention[index, 0, :shared, :shared] = causal[:shared, :shared]
        start = shared
        for row in pack.rows:
            end = start + lengths[row] - shared
            ids[index, start:end] = input_ids[row, shared:lengths[row]]
            positions[index, start:end] = torch.arange(shared, lengths[row])
            attention[index, 0, start:end, :shared] = True
            attention[index, 0, start:end, start:end] = causal[: end - start, : end - start]
            pack_of_row[row], offset_of_row[row], shared_of_row[row] = index, start, shared
            start = end
        # padding attends to itself only: a query with no key would give NaN
        padding = torch.arange(start, width)
        attention[index, 0, padding, padding] = True
    return PackedBatch(ids, positions, attention, pack_of_row, offset_of_row, shared_of_row)
