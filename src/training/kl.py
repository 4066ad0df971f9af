"""Per-token KL estimators to the reference policy (references sections 1 and 1b).

D = logp - ref per token, with tokens sampled from pi (the policy being trained):
- k1 = D: an unbiased value of KL(pi || ref); its expected gradient is 0, so as a loss
  term it regularises nothing.
- k2 = D^2 / 2: its gradient is the gradient of KL(pi || ref).
- k3 = exp(-D) + D - 1 (clamped to [-10, 10]): an unbiased, low-variance value of
  KL(pi || ref), but its gradient is that of the REVERSE direction KL(ref || pi), as
  verl and GRPO use it.
- k3+k2grad: k3's value with k2's gradient (k3 + k2 - sg(k2)): reports KL(pi || ref) and
  regularises towards it.
"""

from __future__ import annotations

from typing import Literal

import torch

KLEstimator = Literal["k1", "k2", "k3", "k3+k2grad"]


def kl_penalty(logp: torch.Tensor, ref: torch.Tensor, estimator: KLEstimator) -> torch.Tensor:
    difference = logp - ref
    if estimator == "k1":
        return difference
    if estimator == "k2":
        return 0.5 * difference.square()
    k3 = torch.clamp(torch.exp(-difference) + difference - 1.0, -10.0, 10.0)
    if estimator == "k3":
        return k3
    if estimator == "k3+k2grad":
        k2 = 0.5 * difference.square()
        return k3.detach() + k2 - k2.detach()
    raise ValueError(f"unknown KL estimator '{estimator}'")
