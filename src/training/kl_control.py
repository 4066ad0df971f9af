"""Controllers of the KL coefficient beta."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class KLController:
    """fixed: beta stays. adaptive (PPO): e = clip(KL/target - 1, -0.2, 0.2),
    beta <- beta (1 + e n_steps / horizon). band: KL > high -> beta * factor,
    KL < low -> beta / factor."""

    kind: Literal["fixed", "adaptive", "band"] = "fixed"
    beta: float = 0.0
    target: float = 0.1
    horizon: int = 10000
    band_low: float = 0.01
    band_high: float = 0.1
    band_factor: float = 1.5

    def update(self, kl: float, n_steps: int = 1) -> float:
        if self.kind == "adaptive":
            error = min(max(kl / self.target - 1.0, -0.2), 0.2)
            self.beta *= 1.0 + error * n_steps / self.horizon
        elif self.kind == "band":
            if kl > self.band_high:
                self.beta *= self.band_factor
            elif kl < self.band_low:
                self.beta /= self.band_factor
        return self.beta
