"""Few-shot memory: earlier decisions, recalled for households in similar situations.

As the seed's retrieval step does, a prompt may show up to k of the best earlier decisions
made in the situations nearest to the household's. Decisions are compared by how much they
beat the rule policy in their own state (reward minus the rule's reward), since raw rewards
mostly say how rich a household was. The memory holds at most `capacity` decisions (the
oldest go first); recall ranks by distance, then by advantage, then by age, so it is
deterministic for a given history. `save` and `load` carry that history across a resumed
run (floats round-trip exactly through JSON).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from src.tasks.instance.econ.simulation import HOURS_PER_MONTH

CANDIDATES_PER_EXAMPLE = 4  # the k best are chosen among the 4k nearest situations


class Experience(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    features: tuple[float, ...]  # where the situation lies (see situation_features)
    situation: str  # how the prompt describes it
    work: float
    consumption: float
    advantage: float  # reward minus the rule policy's reward in the same state


def situation_features(savings: float, wage: float, price: float,
                       redistribution: float) -> tuple[float, ...]:
    """Savings, full-time pay and the transfer in goods, on a log scale (the situations
    span orders of magnitude)."""
    return (float(np.log1p(savings / price)), float(np.log1p(HOURS_PER_MONTH * wage / price)),
            float(np.log1p(redistribution / price)))


class ExperienceMemory:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ExperienceMemory: capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._experiences: deque[Experience] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._experiences)

    def add(self, experience: Experience) -> None:
        self._experiences.append(experience)

    def clear(self) -> None:
        self._experiences.clear()

    def save(self, path: Path) -> None:
        """Write the history to `path` (the loop's checkpoint folder is renamed into place
        atomically, so a plain write suffices)."""
        state = _MemoryState(capacity=self.capacity, experiences=list(self._experiences))
        path.write_text(state.model_dump_json() + "\n", encoding="utf-8")

    def load(self, path: Path) -> None:
        """Replace the history with the one `save` wrote."""
        state = _MemoryState.model_validate_json(path.read_text(encoding="utf-8"))
        if state.capacity != self.capacity:
            raise ValueError(f"{path}: a memory of capacity {state.capacity}, this one holds "
                             f"{self.capacity}")
        self._experiences.clear()
        self._experiences.extend(state.experiences)

    def recall(self, features: tuple[float, ...], count: int) -> list[Experience]:
        if count < 1 or not self._experiences:
            return []
        experiences = list(self._experiences)
        distances = np.linalg.norm(np.array([e.features for e in experiences])
                                   - np.array(features), axis=1)
        nearest = sorted(range(len(experiences)), key=lambda i: (distances[i], i))
        nearest = nearest[:CANDIDATES_PER_EXAMPLE * count]
        chosen: list[Experience] = []
        shown: set[tuple[str, float, float]] = set()
        # the completions of a group often agree: show each decision in a situation once
        for i in sorted(nearest, key=lambda i: (-experiences[i].advantage, i)):
            experience = experiences[i]
            key = (experience.situation, experience.work, experience.consumption)
            if key not in shown and len(chosen) < count:
                shown.add(key)
                chosen.append(experience)
        return chosen


class _MemoryState(BaseModel):
    """The saved history, oldest first."""

    model_config = ConfigDict(extra="forbid")

    capacity: int
    experiences: list[Experience]
