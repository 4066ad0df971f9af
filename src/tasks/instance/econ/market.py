"""The goods market: demand meets the inventory, and the imbalance moves wages and prices."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MarketClearing:
    bought: np.ndarray  # goods each household gets
    imbalance: float  # phi = (demand - inventory) / max(demand, inventory), in [-1, 1]


def imbalance(demand: float, inventory: float) -> float:
    larger = max(demand, inventory)
    return 0.0 if larger <= 0.0 else (demand - inventory) / larger


def clear_goods_market(demand: np.ndarray, inventory: float) -> MarketClearing:
    """Serve every demand; when goods are short, every household gets the same share of its
    demand (proportional rationing keeps the outcome independent of any queue order)."""
    total = float(demand.sum())
    served = 1.0 if total <= inventory else inventory / total
    return MarketClearing(bought=demand * served, imbalance=imbalance(total, inventory))


def adjust_level(level: np.ndarray | float, draw: np.ndarray | float, max_rate: float,
                 phi: float) -> np.ndarray | float:
    """A wage or the price after a month with imbalance phi: it moves by a uniform draw in
    [0, max_rate * |phi|], up when demand exceeds the goods and down otherwise
    (`draw` is the uniform [0, 1) share of the largest move)."""
    return level * (1.0 + draw * max_rate * phi)
