"""Token-weighted metric sums over the micro-batches and steps of an update."""

from __future__ import annotations

import torch


class TokenMetrics:
    """sum(value * mask) / sum(mask) per name, summed over everything added."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, float] = {}

    def add(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        self._sums[name] = self._sums.get(name, 0.0) + (values.detach() * mask).sum().item()
        self._counts[name] = self._counts.get(name, 0.0) + mask.sum().item()

    def merge(self, other: TokenMetrics) -> None:
        """Add another's sums and counts (a worker's share of the same update)."""
        for name, total in other._sums.items():
            self._sums[name] = self._sums.get(name, 0.0) + total
            self._counts[name] = self._counts.get(name, 0.0) + other._counts[name]

    def means(self) -> dict[str, float]:
        return {name: total / max(self._counts[name], 1.0) for name, total in self._sums.items()}
