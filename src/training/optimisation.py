"""Optimiser plumbing shared by the online RL trainer and the offline group trainer."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch

LearningRateSchedule = Literal["constant", "cosine"]


def learning_rate_factor(warmup_steps: int, total_steps: int,
                         schedule: LearningRateSchedule) -> Callable[[int], float]:
    """The LambdaLR factor: linear warmup (step + 1) / (warmup + 1) over the first
    `warmup_steps`, then constant 1 or a cosine from 1 down to 0 at `total_steps`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def zero_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Give every parameter a gradient of zeros, as a backward of a loss whose gradient is
    exactly zero leaves it (zeros in each parameter's dtype and shape, not None: the
    optimiser skips a parameter whose gradient is None, and its state would then not
    decay, nor its step count advance)."""
    for parameter in parameters:
        parameter.grad = torch.zeros_like(parameter)


def clipped_optimizer_step(optimizer: torch.optim.Optimizer,
                           scheduler: torch.optim.lr_scheduler.LRScheduler | None,
                           parameters: list[torch.nn.Parameter],
                           max_grad_norm: float | None) -> float:
    """Clip the gradient norm (when `max_grad_norm` is set), step, advance the schedule and
    clear the gradients. Returns the gradient norm before clipping."""
    if max_grad_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    else:
        norm = torch.linalg.vector_norm(torch.stack([
            p.grad.detach().norm() for p in parameters if p.grad is not None]))
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)
