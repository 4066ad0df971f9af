"""Keys and values of the sequences a sampling call ended with, reused by the next call.

A multi-turn episode's next prompt is its last prompt + the sampled reply + the new
observation (turns are appended, never re-rendered), so its attention keys and values
up to the reply are already known: only the new tokens need a forward pass. Entries
hold the weights' output, so they are dropped whenever the weights may change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

LayerKV = tuple[torch.Tensor, torch.Tensor]  # keys, values: [heads, length, head_dim]


@dataclass
class CachedPrefix:
    token_ids: tuple[int, ...]
    layers: list[LayerKV]


class PrefixCache:
    def __init__(self) -> None:
        self._entries: dict[tuple[int, ...], CachedPrefix] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def longest_prefix(self, token_ids: Sequence[int]) -> CachedPrefix | None:
        """The longest entry that is a proper prefix of `token_ids` (at least one token
        must remain to be fed, for the logits of the next one)."""
        best: CachedPrefix | None = None
        for key, entry in self._entries.items():
            if (len(key) < len(token_ids) and (best is None or len(key) > len(best.token_ids))
                    and tuple(token_ids[: len(key)]) == key):
                best = entry
        return best

    def replace(self, entries: Sequence[CachedPrefix]) -> None:
        """Keep only the given entries: a call's own ends bound the memory held."""
        self._entries = {entry.token_ids: entry for entry in entries}

    def clear(self) -> None:
        self._entries = {}
