"""A component of a run as planned: its place in the config, its class and its checked
parameters (nested components as plans of their own)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ComponentPlan:
    key_path: tuple[str | int, ...]
    name: str
    cls: type
    parameters: dict[str, Any]

    def describe(self) -> str:
        return f"{'.'.join(map(str, self.key_path))}: {self.cls.__module__}.{self.cls.__qualname__}"
