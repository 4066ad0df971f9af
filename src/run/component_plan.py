"""A component of a run as planned: its place in the config, its class and its checked
parameters (nested components as plans of their own)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from src.tasks.reward_functions import RewardTerm


@dataclass(frozen=True)
class ComponentPlan:
    key_path: tuple[str | int, ...]
    name: str
    cls: type
    parameters: dict[str, Any]
    # a task's `reward_terms` where its constructor takes none: added to the family once
    # built (`Task.add_reward_terms`)
    added_terms: tuple[RewardTerm, ...] = ()

    def describe(self) -> str:
        added = "".join(f"\n  + reward term {term.function} (weight {term.weight})"
                        for term in self.added_terms)
        return (f"{'.'.join(map(str, self.key_path))}: {self.cls.__module__}."
                f"{self.cls.__qualname__}{added}")
