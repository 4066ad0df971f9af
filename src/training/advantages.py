"""Advantage estimators (references section 1): one small class per estimator, by name.

Each turns the returns R of a batch and the group id of each completion into one
advantage per completion. A group whose returns are all equal carries no signal and
gets A = 0 exactly (src.maths.groups). A new estimator is one class here, registered by
its name in ADVANTAGE_ESTIMATORS: `advantage.estimator` accepts every registered name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch

from src.configuration.registry import RegisteredName, Registry
from src.maths.groups import EPS, group_statistics, group_zscore

BaselineKind = Literal["none", "running_mean", "group_mean"]


class AdvantageEstimator:
    """A = f(R, groups). Stateful estimators (a running baseline) save their state."""

    # A is relative to the group: a group with equal returns has no signal (A = 0)
    group_relative: bool = True

    def __call__(self, returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


ADVANTAGE_ESTIMATORS: Registry[type[AdvantageEstimator]] = Registry("advantage estimator")
AdvantageEstimatorName = Annotated[str, RegisteredName(ADVANTAGE_ESTIMATORS)]


def _centred(returns: torch.Tensor, group_ids: torch.Tensor,
             baseline_of_member: torch.Tensor) -> torch.Tensor:
    """R - baseline, 0 in groups with equal returns, R for a group of one."""
    _, _, size, equal = group_statistics(returns, group_ids)
    values = returns.double()
    result = torch.where(equal, torch.zeros_like(values), values - baseline_of_member)
    return torch.where(size == 1, values, result).to(returns.dtype)


@ADVANTAGE_ESTIMATORS.register("grpo")
class GRPO(AdvantageEstimator):
    """A_i = (R_i - mean_g) / (std_g + eps), std unbiased; a group of one keeps A = R."""

    def __call__(self, returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        return group_zscore(returns, group_ids)


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
class DrGRPO(AdvantageEstimator):
    """A_i = R_i - mean_g (Dr. GRPO: no division by the group's std)."""

    def __call__(self, returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        mean, _, _, _ = group_statistics(returns, group_ids)
        return _centred(returns, group_ids, mean)


@ADVANTAGE_ESTIMATORS.register("rloo")
class RLOO(AdvantageEstimator):
    """A_i = R_i - mean of the other G-1 returns of its group."""

    def __call__(self, returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        mean, _, size, _ = group_statistics(returns, group_ids)
        others = (mean * size - returns.double()) / (size - 1).clamp(min=1)
        return _centred(returns, group_ids, others)


@ADVANTAGE_ESTIMATORS.register("reinforce")
class Reinforce(AdvantageEstimator):
    """A_i = R_i - b: b = 0, the group mean, or a running mean (EMA with `decay`) of the
    batches before this one (updated after use, so a batch never sees its own mean)."""

    def __init__(self, baseline: BaselineKind = "running_mean", decay: float = 0.9) -> None:
        self.group_relative = baseline == "group_mean"
        self.baseline = baseline
        self.decay = decay
        self.running_mean: float | None = None

    def __call__(self, returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        if self.baseline == "group_mean":
            return DrGRPO()(returns, group_ids)
        baseline = 0.0
        if self.baseline == "running_mean":
            baseline = self.running_mean if self.running_mean is not None else 0.0
            mean = returns.double().mean().item()
            self.running_mean = mean if self.running_mean is None else (
                self.decay * self.running_mean + (1 - self.decay) * mean)
        return returns - baseline

    def state_dict(self) -> dict[str, Any]:
        return {"running_mean": self.running_mean}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.running_mean = state.get("running_mean")


def whiten(values: torch.Tensor) -> torch.Tensor:
    """REINFORCE++: normalise advantages over the whole batch (float64; a batch of equal
    values gives exactly 0)."""
    numbers = values.double()
    if values.numel() < 2 or bool(numbers.max() == numbers.min()):
        return torch.zeros_like(values)
    return ((numbers - numbers.mean()) / (numbers.std(unbiased=True) + EPS)).to(values.dtype)
