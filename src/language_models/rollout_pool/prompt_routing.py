"""Which engine of a rollout pool each prompt of a call goes to.

A multi-turn episode's next prompt continues the sequence its last turn produced, and
the engine that produced it holds that sequence's keys and values in its prefix cache:
the prompt goes back there while loads stay even.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


class PromptRouter:
    """Shares prompts out among `num_engines` engines, remembering the sequences each
    produced in the last call."""

    def __init__(self, num_engines: int) -> None:
        self.num_engines = num_engines
        self._engine_of: dict[tuple[int, ...], int] = {}  # sequence -> engine that produced it
        self._lengths: list[int] = []  # the lengths of those sequences, longest first

    def remember(self, engine_of: Mapping[tuple[int, ...], int]) -> None:
        """The sequences (prompt + completion) the last call produced, with their engines."""
        self._engine_of = dict(engine_of)
        self._lengths = sorted({len(sequence) for sequence in engine_of}, reverse=True)

    def engine_for(self, prompt: Sequence[int]) -> int | None:
        """The engine that produced the longest remembered sequence `prompt` begins with."""
        return next((self._engine_of[key] for length in self._lengths
                     if length <= len(prompt)
                     and (key := tuple(prompt[:length])) in self._engine_of), None)

    def assign(self, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
        """Prompt indices per engine: a prompt goes to `engine_for` it while that engine
        has room; the rest fill the least loaded engines. Loads stay within one prompt of
        even."""
        capacity = math.ceil(len(prompts) / self.num_engines)
        shares: list[list[int]] = [[] for _ in range(self.num_engines)]
        unplaced: list[int] = []
        for index, prompt in enumerate(prompts):
            engine = self.engine_for(prompt)
            if engine is not None and len(shares[engine]) < capacity:
                shares[engine].append(index)
            else:
                unplaced.append(index)
        for index in unplaced:
            min(shares, key=len).append(index)
        return shares
