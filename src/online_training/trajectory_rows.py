"""From an RL batch's trajectories to the trainer's token rows, and the batch's figures.

The rows hold exactly the ids the agent sampled and the sampler's log-probs, under the one
temperature the sampler used, so that the PPO ratio is 1 on policy.
"""

from __future__ import annotations

import numpy as np
import torch

from src.language_models.language_model import TrainableLanguageModel
from src.maths.groups import group_statistics
from src.records.trajectory import Trajectory
from src.training.token_rows import TokenRows


def sampling_temperature(trajectories: list[Trajectory]) -> float:
    """The one temperature: the sampler's, recorded with every trajectory. The PPO ratio
    is 1 on policy only when the trainer scores under the sampling distribution."""
    temperatures = {t.sampling_temperature for t in trajectories}
    top_ps = {t.sampling_top_p for t in trajectories}
    if len(temperatures) != 1:
        raise ValueError(f"a batch mixes sampling temperatures {sorted(temperatures)}; "
                         "the trainer must score under the one the sampler used")
    if top_ps != {1.0}:
        raise ValueError(
            f"the agent samples with top_p {sorted(top_ps)}: its recorded log-probs are "
            "renormalised over the nucleus, so the trainer's ratio against them is not 1 "
            "on policy; set the agent's top_p to 1.0 for RL training")
    temperature = temperatures.pop()
    if temperature <= 0:
        raise ValueError("greedy (temperature 0) samples cannot be trained on by RL")
    return temperature


def token_rows(trajectories: list[Trajectory], model: TrainableLanguageModel,
               mask_truncated: bool) -> tuple[TokenRows, int]:
    """The trajectories' ids and loss masks (a truncated completion's masked out where
    `mask_truncated`), with the sampler's log-probs as the PPO ratio's "old" (replaced by
    the trainer's when mismatch.old_logprobs is trainer); and how many were cut to the
    model's context. A trajectory longer than it (an environment's long last observation,
    the episode then ended at the context limit) is trained on its first
    `max_context_tokens` only: nothing past the context is scored or trained."""
    context = model.max_context_tokens
    masks = [list(t.loss_mask) for t in trajectories]
    if mask_truncated:
        masks = [[0] * len(m) if t.truncated else m
                 for t, m in zip(trajectories, masks, strict=True)]
    rows = TokenRows.from_sequences([t.token_ids[:context] for t in trajectories],
                                    [mask[:context] for mask in masks],
                                    pad_id=model.pad_id)
    sampler = torch.zeros_like(rows.batch.loss_mask)
    for row, trajectory in enumerate(trajectories):
        logprobs = trajectory.sampling_logprobs[:context]
        sampler[row, : len(logprobs)] = torch.tensor(logprobs)
    rows.sampler_logprobs = sampler
    rows.old_logprobs = sampler
    return rows, sum(len(t.token_ids) > context for t in trajectories)


def batch_figures(task_returns: torch.Tensor, group_ids: torch.Tensor,
                   no_spread: torch.Tensor, rows: TokenRows,
                   trajectories: list[Trajectory]) -> dict[str, float]:
    """The batch's reward and length figures (the task's returns, before any KL)."""
    _, group_std, _, _ = group_statistics(task_returns, group_ids)
    one_per_group = torch.tensor([int((group_ids == group).nonzero()[0])
                                  for group in group_ids.unique()])
    return {
        "reward": task_returns.mean().item(),
        # TRL's meaning: the mean over groups of each group's std
        "reward_std": group_std[one_per_group].mean().item(),
        "reward_std/batch": (task_returns.std(unbiased=True).item()
                             if len(task_returns) > 1 else 0.0),
        "frac_reward_zero_std": no_spread.float().mean().item(),
        "advantage_abs_mean": rows.advantages.abs().mean().item(),
        "completions/mean_length": rows.batch.loss_mask.sum(-1).mean().item(),
        "completions/clipped_ratio": float(np.mean([t.truncated for t in trajectories])),
    }
