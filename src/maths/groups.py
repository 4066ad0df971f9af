"""Per-group statistics of scalar scores: the leaf maths that rewards and RL both use.

A group is the completions of one sample (references section 1). Statistics are taken in
float64 and a group counts as having no spread only when its scores are equal, so that
equal rewards give exactly zero, whatever their value: in float32, eight rewards of -0.1
have a mean that differs from -0.1 in the last bit, and (R - mean) / (std + eps) then
came out as +0.0074 for every member.
"""

from __future__ import annotations

import torch

EPS = 1e-6


def group_statistics(scores: torch.Tensor, group_ids: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per member (float64): its group's mean, unbiased std (n-1, 0 for a group of one),
    size, and whether all its group's scores are equal."""
    values = scores.double()
    mean = torch.zeros_like(values)
    std = torch.zeros_like(values)
    size = torch.zeros_like(values)
    equal = torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    for group in group_ids.unique():
        members = group_ids == group
        group_values = values[members]
        mean[members] = group_values.mean()
        std[members] = group_values.std(unbiased=True) if group_values.numel() > 1 else 0.0
        size[members] = group_values.numel()
        equal[members] = bool(group_values.max() == group_values.min())
    return mean, std, size, equal


def zero_spread(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """True for members of a group of two or more whose scores are all equal."""
    _, _, size, equal = group_statistics(scores, group_ids)
    return equal & (size > 1)


def group_zscore(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(s - mean_g) / (std_g + eps), exactly 0 in a group whose scores are equal; a group
    of one keeps its score (verl's choice: mean 0, std 1). Returned in `scores`' dtype."""
    mean, std, size, equal = group_statistics(scores, group_ids)
    values = scores.double()
    result = torch.where(equal, torch.zeros_like(values), (values - mean) / (std + EPS))
    return torch.where(size == 1, values, result).to(scores.dtype)
