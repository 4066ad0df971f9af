"""Online RL: at the end of each batch, turn finished episodes into updates of the LoRA policy.

Reads top to bottom as the algorithm: returns -> (KL in reward) -> advantages ->
epochs x mini-batches x micro-batches of (policy loss + KL + entropy) -> optimiser step.
The maths lives in src.training.policy_gradient.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from src.callbacks.callback import BatchContext, Callback
from src.configuration.components import import_dotted
from src.experiment.files import atomic_directory, atomic_write_json
from src.language_models.language_model import TokenBatch, TrainableLanguageModel
from src.records.episode import Episode, EpisodeStatus, Outcome
from src.training.kl_control import KLController
from src.training.micro_batches import split_by_token_budget
from src.training.optimisation import clipped_optimizer_step, learning_rate_factor
from src.training.policy_gradient import (
    AdvantageEstimator,
    KLEstimator,
    LossAggregation,
    advantages,
    aggregate,
    kl_penalty,
    ppo_clip_loss,
    reinforce_loss,
    whiten,
    zero_spread_groups,
)
from src.training.rng_state import load_rng_state, save_rng_state


class RLTrainingCallback(Callback):
    def __init__(
        self,
        language_model: TrainableLanguageModel,
        algorithm: AdvantageEstimator = "grpo",
        reinforce_baseline: Literal["none", "running_mean", "group_mean"] = "running_mean",
        baseline_decay: float = 0.9,
        whiten_advantages: bool = False,
        policy_loss: Literal["ppo_clip", "reinforce"] = "ppo_clip",
        clip_ratio_low: float = 0.2,
        clip_ratio_high: float = 0.2,
        dual_clip: float | None = 3.0,
        ppo_epochs: int = 1,
        mini_batch_size: int | None = None,
        loss_aggregation: LossAggregation = "token-mean",
        loss_norm_length: int | None = None,
        advantage_clip: float | None = 5.0,
        zero_std_groups: Literal["keep", "drop"] = "keep",
        mask_truncated_completions: bool = False,
        kl_coef: float = 0.0,
        kl_estimator: KLEstimator = "k3",
        kl_in_reward: bool = False,
        kl_controller: Literal["fixed", "adaptive", "band"] = "fixed",
        kl_target: float = 0.1,
        kl_horizon: int = 10000,
        entropy_coeff: float = 0.0,
        temperature: float = 1.0,
        reward_from: Literal["task", "outcome"] = "task",
        reward_weight: float = 1.0,
        reward_correct: float = 1.0,
        reward_incorrect: float = -0.1,
        reward_timeout: float = -0.3,
        learning_rate: float = 1e-5,
        optimizer_class: str = "AdamW",
        weight_decay: float = 0.0,
        lr_schedule: Literal["constant", "cosine"] = "constant",
        warmup_ratio: float = 0.0,
        gradient_accumulation_steps: int = 1,
        micro_batch_max_tokens: int | None = 512,
        max_grad_norm: float | None = 1.0,
        best_metric: str | None = "reward",
        max_policy_staleness: int | None = 0,
        seed: int = 0,
    ) -> None:
        self.model = language_model
        self.algorithm = algorithm
        self.reinforce_baseline = reinforce_baseline
        self.baseline_decay = baseline_decay
        self.whiten_advantages = whiten_advantages
        self.policy_loss = policy_loss
        self.clip_ratio_low, self.clip_ratio_high, self.dual_clip = (
            clip_ratio_low, clip_ratio_high, dual_clip)
        self.ppo_epochs = ppo_epochs
        self.mini_batch_size = mini_batch_size
        self.loss_aggregation = loss_aggregation
        self.loss_norm_length = loss_norm_length
        self.advantage_clip = advantage_clip
        self.zero_std_groups = zero_std_groups
        self.mask_truncated_completions = mask_truncated_completions
        self.kl = KLController(kind=kl_controller, beta=kl_coef, target=kl_target,
                               horizon=kl_horizon)
        self.kl_estimator = kl_estimator
        self.kl_in_reward = kl_in_reward
        self.entropy_coeff = entropy_coeff
        self.temperature = temperature
        self.reward_from = reward_from
        self.reward_weight = reward_weight
        self.outcome_rewards = {"correct": reward_correct, "incorrect": reward_incorrect,
                                "timeout": reward_timeout}
        self.learning_rate = learning_rate
        self.optimizer_class = optimizer_class
        self.weight_decay = weight_decay
        self.lr_schedule = lr_schedule
        self.warmup_ratio = warmup_ratio
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.micro_batch_max_tokens = micro_batch_max_tokens
        self.max_grad_norm = max_grad_norm
        self.best_metric = best_metric
        self.max_policy_staleness = max_policy_staleness
        self.seed = seed

        self.step = 0  # optimiser steps taken
        self.running_baseline: float | None = None
        self.best_value: float | None = None
        self._last_metrics: dict[str, float] = {}
        optimizer_type = (getattr(torch.optim, optimizer_class, None)
                          or import_dotted(optimizer_class))
        self.optimizer: torch.optim.Optimizer = optimizer_type(
            self.model.trainable_parameters(), lr=learning_rate, weight_decay=weight_decay)
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None

    # ---- schedule ------------------------------------------------------------------
    def on_run_start(self, total_batches: int, episodes_per_batch: int | None = None) -> None:
        # optimiser steps per batch: one per mini-batch per epoch (a batch with fewer
        # episodes takes fewer, and the schedule then stops short of its end)
        mini_batches = 1
        if self.mini_batch_size and episodes_per_batch:
            mini_batches = math.ceil(episodes_per_batch / self.mini_batch_size)
        total_steps = max(1, total_batches * self.ppo_epochs * mini_batches)
        warmup = int(self.warmup_ratio * total_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, learning_rate_factor(warmup, total_steps, self.lr_schedule))

    # ---- returns -------------------------------------------------------------------
    def episode_return(self, episode: Episode) -> float:
        if self.reward_from == "task":
            reward = episode.reward
        elif episode.outcome is Outcome.CORRECT:
            reward = self.outcome_rewards["correct"]
        elif episode.status is EpisodeStatus.TASK_LIMIT_REACHED:
            reward = self.outcome_rewards["timeout"]
        else:
            reward = self.outcome_rewards["incorrect"]
        return self.reward_weight * reward

    # ---- the update ----------------------------------------------------------------
    def on_batch_end(self, batch: BatchContext) -> dict[str, float]:
        episodes = [e for e in batch.episodes if e.trajectory and e.trajectory.completion_token_count]
        # Staleness: how many updates the trainer is ahead of the policy that sampled.
        staleness = [self.model.policy_version - (e.trajectory.policy_version or 0)
                     for e in episodes]
        staleness_metrics = {"policy_staleness/max": float(max(staleness, default=0))}
        if self.max_policy_staleness is not None:
            fresh = [e for e, s in zip(episodes, staleness, strict=True)
                     if s <= self.max_policy_staleness]
            staleness_metrics["policy_staleness/dropped"] = float(len(episodes) - len(fresh))
            episodes = fresh
        if not episodes:
            return {"skipped_batches": 1.0, **staleness_metrics}
        trajectories = [episode.trajectory for episode in episodes]
        tokens = self._token_batch(episodes)
        old_logprobs = tokens.extras["old_logprobs"]
        returns = torch.tensor([self.episode_return(e) for e in episodes], dtype=torch.float32)
        group_keys = {(e.sample.sample_id, e.batch_index) for e in episodes}
        group_index = {key: i for i, key in enumerate(sorted(group_keys))}
        group_ids = torch.tensor([group_index[(e.sample.sample_id, e.batch_index)]
                                  for e in episodes])
        metrics: dict[str, float] = dict(staleness_metrics)

        needs_reference = self.kl.beta > 0 or self.kl_in_reward
        ref_logprobs = None
        if needs_reference:
            ref_logprobs = self._reference_logprobs(tokens)
        if self.kl_in_reward and ref_logprobs is not None:
            per_token = kl_penalty(old_logprobs, ref_logprobs, self.kl_estimator) * tokens.loss_mask
            returns = returns - self.kl.beta * per_token.sum(-1)

        advantage = self._advantages(returns, group_ids)
        zero_spread = zero_spread_groups(returns, group_ids)
        keep = torch.ones(len(episodes), dtype=torch.bool)
        if self.zero_std_groups == "drop":
            keep = ~zero_spread
        metrics.update({
            "reward": returns.mean().item(),
            "reward_std": returns.std(unbiased=True).item() if len(returns) > 1 else 0.0,
            "frac_reward_zero_std": zero_spread.float().mean().item(),
            "advantage_abs_mean": advantage.abs().mean().item(),
            "completions/mean_length": tokens.loss_mask.sum(-1).mean().item(),
            "completions/clipped_ratio": float(np.mean([t.truncated for t in trajectories])),
        })
        if keep.any():
            metrics.update(self._optimise(tokens, old_logprobs, ref_logprobs, advantage, keep))
        self.model.mark_updated()
        metrics["policy_version"] = float(self.model.policy_version)
        self._last_metrics = metrics
        return metrics

    def _token_batch(self, episodes: list[Episode]) -> TokenBatch:
        """The episodes' token ids, loss masks and (as extras) the sampler's log-probs."""
        trajectories = [episode.trajectory for episode in episodes]
        masks = [list(t.loss_mask) for t in trajectories]
        if self.mask_truncated_completions:
            masks = [[0] * len(m) if t.truncated else m
                     for t, m in zip(trajectories, masks, strict=True)]
        tokens = TokenBatch.from_sequences([t.token_ids for t in trajectories], masks,
                                           pad_id=getattr(self.model, "pad_id", 0))
        old_logprobs = torch.zeros_like(tokens.loss_mask)
        for row, trajectory in enumerate(trajectories):
            old_logprobs[row, : len(trajectory.sampling_logprobs)] = torch.tensor(
                trajectory.sampling_logprobs)
        tokens.extras["old_logprobs"] = old_logprobs
        return tokens

    def _advantages(self, returns: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        baseline: torch.Tensor | float = 0.0
        if self.algorithm == "reinforce":
            if self.reinforce_baseline == "group_mean":
                advantage = advantages(returns, group_ids, "dr_grpo")
            else:
                if self.reinforce_baseline == "running_mean" and self.running_baseline is not None:
                    baseline = self.running_baseline
                advantage = advantages(returns, group_ids, "reinforce", baseline)
            if self.reinforce_baseline == "running_mean":  # update after use: no peeking
                mean = returns.mean().item()
                self.running_baseline = mean if self.running_baseline is None else (
                    self.baseline_decay * self.running_baseline + (1 - self.baseline_decay) * mean)
        else:
            advantage = advantages(returns, group_ids, self.algorithm)
        if self.whiten_advantages:
            advantage = whiten(advantage)
        if self.advantage_clip is not None:
            advantage = advantage.clamp(-self.advantage_clip, self.advantage_clip)
        return advantage

    @torch.no_grad()
    def _reference_logprobs(self, tokens: TokenBatch) -> torch.Tensor:
        self.model.eval_mode()
        reference = torch.zeros_like(tokens.loss_mask)
        for rows in self._micro_batches(list(range(tokens.input_ids.shape[0])), tokens):
            part = self.model.score(self._select(tokens, rows), temperature=self.temperature,
                                    with_adapter=False).logprobs
            reference[rows, : part.shape[1]] = part.to(reference.device)
        return reference

    def _micro_batches(self, rows: list[int], tokens: TokenBatch) -> list[list[int]]:
        """`gradient_accumulation_steps` equal parts, each cut further so that its padded
        size (rows x longest row) stays within `micro_batch_max_tokens`: activation memory
        grows with that size, and the loss is the same however the rows are split."""
        count = max(1, min(self.gradient_accumulation_steps, len(rows)))
        size = math.ceil(len(rows) / count)
        parts = [rows[start:start + size] for start in range(0, len(rows), size)]
        lengths = tokens.attention_mask.sum(-1).tolist()
        return [micro for part in parts
                for micro in split_by_token_budget(part, lengths, self.micro_batch_max_tokens)]

    @staticmethod
    def _select(tokens: TokenBatch, rows: list[int]) -> TokenBatch:
        index = torch.tensor(rows)
        width = int(tokens.attention_mask[index].sum(-1).max().item())
        return TokenBatch(tokens.input_ids[index, :width], tokens.attention_mask[index, :width],
                          tokens.loss_mask[index, :width])

    def _optimise(self, tokens: TokenBatch, old_logprobs: torch.Tensor,
                  ref_logprobs: torch.Tensor | None, advantage: torch.Tensor,
                  keep: torch.Tensor) -> dict[str, float]:
        self.model.train_mode()
        rows = keep.nonzero().squeeze(-1).tolist()
        mini_size = self.mini_batch_size or len(rows)
        shuffle = random.Random(f"{self.seed}-{self.step}")
        # token-weighted sums (divided by their token counts at the end) and per-step values
        token_sums: dict[str, float] = {}
        token_counts: dict[str, float] = {}
        per_step: dict[str, list[float]] = {"loss": [], "grad_norm": []}

        def add_tokens(key: str, values: torch.Tensor, mask: torch.Tensor) -> None:
            token_sums[key] = token_sums.get(key, 0.0) + (values.detach() * mask).sum().item()
            token_counts[key] = token_counts.get(key, 0.0) + mask.sum().item()

        for epoch in range(self.ppo_epochs):
            order = list(rows)
            if self.ppo_epochs > 1 or mini_size < len(rows):
                shuffle.shuffle(order)
            for start in range(0, len(order), mini_size):
                mini = order[start:start + mini_size]
                mini_mask = tokens.loss_mask[mini]
                num_tokens = float(mini_mask.sum())
                norm_length = self.loss_norm_length or int(mini_mask.sum(-1).max().item())
                step_loss = 0.0
                for micro in self._micro_batches(mini, tokens):
                    part = self._select(tokens, micro)
                    width = part.input_ids.shape[1]
                    scored = self.model.score(part, temperature=self.temperature,
                                              with_entropy=True)
                    assert scored.entropy is not None
                    # the batch is built on the CPU; the model may score on a GPU
                    device = scored.logprobs.device
                    mask = part.loss_mask.to(device)
                    old = old_logprobs[micro, :width].to(device)
                    adv = advantage[micro][:, None].to(device)
                    if self.policy_loss == "reinforce":
                        per_token = reinforce_loss(scored.logprobs, adv)
                    else:
                        clip = ppo_clip_loss(scored.logprobs, old, adv, self.clip_ratio_low,
                                             self.clip_ratio_high, self.dual_clip)
                        per_token = clip.per_token
                        add_tokens("clip_ratio/low_mean", clip.clipped_low.float(), mask)
                        add_tokens("clip_ratio/high_mean", clip.clipped_high.float(), mask)

                    reduce = partial(aggregate, mask=mask, mode=self.loss_aggregation,
                                     norm_length=norm_length, num_sequences=len(mini),
                                     num_tokens=num_tokens)

                    loss = reduce(per_token)
                    if self.entropy_coeff:
                        loss = loss - self.entropy_coeff * reduce(scored.entropy)
                    if ref_logprobs is not None:
                        kl = kl_penalty(scored.logprobs, ref_logprobs[micro, :width].to(device),
                                        self.kl_estimator)
                        if self.kl.beta > 0 and not self.kl_in_reward:
                            loss = loss + self.kl.beta * reduce(kl)
                        add_tokens("kl", kl, mask)
                    loss.backward()
                    step_loss += loss.item()
                    add_tokens("entropy", scored.entropy, mask)
                    if epoch == 0 and start == 0:  # before any step of this batch
                        add_tokens("logprob_diff/sampler_trainer",
                                   (scored.logprobs - old).abs(), mask)
                per_step["loss"].append(step_loss)
                per_step["grad_norm"].append(self._optimizer_step())
        self.model.eval_mode()
        metrics = {key: token_sums[key] / max(token_counts[key], 1.0) for key in token_sums}
        metrics.update({key: sum(values) / len(values) for key, values in per_step.items()})
        metrics["learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["kl_coef"] = self.kl.beta
        if "kl" in metrics:
            self.kl.update(metrics["kl"], n_steps=len(rows))
        return metrics

    def _optimizer_step(self) -> float:
        norm = clipped_optimizer_step(self.optimizer, self.scheduler,
                                      self.model.trainable_parameters(), self.max_grad_norm)
        self.step += 1
        return norm

    # ---- state ---------------------------------------------------------------------
    def save_state(self, directory: Path) -> None:
        self.model.save_adapter(directory / "lora_weights")
        torch.save({"optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict() if self.scheduler else None},
                   directory / "optimizer_state.pt")
        save_rng_state(directory / "rng_state.pt")
        value = self._last_metrics.get(self.best_metric) if self.best_metric else None
        if value is not None and (self.best_value is None or value > self.best_value):
            self.best_value = value
            # `directory` is a temp folder beside the checkpoints: best/ goes beside them too
            with atomic_directory(directory.parent / "best") as best:
                shutil.copytree(directory / "lora_weights", best / "lora_weights")
                atomic_write_json(best / "best.json", {"metric": self.best_metric,
                                                       "value": value, "step": self.step})
        atomic_write_json(directory / "training_step.json", {
            "optimizer_step": self.step,
            "policy_version": self.model.policy_version,
            "kl_coef": self.kl.beta,
            "running_baseline": self.running_baseline,
            "best_metric": self.best_metric,
            "best_value": self.best_value,
        })

    def restore_state(self, directory: Path) -> None:
        self.model.load_adapter(directory / "lora_weights")
        optimizer_state = torch.load(directory / "optimizer_state.pt", weights_only=False)
        self.optimizer.load_state_dict(optimizer_state["optimizer"])
        if self.scheduler is not None and optimizer_state["scheduler"] is not None:
            self.scheduler.load_state_dict(optimizer_state["scheduler"])
        load_rng_state(directory / "rng_state.pt")
        step = json.loads((directory / "training_step.json").read_text())
        self.step = step["optimizer_step"]
        self.kl.beta = step["kl_coef"]
        self.running_baseline = step["running_baseline"]
        self.best_value = step["best_value"]
        set_version = getattr(self.model, "set_policy_version", None)
        if set_version is not None:
            set_version(step["policy_version"])
