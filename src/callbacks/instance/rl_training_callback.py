"""Online RL: at the end of each batch, turn finished episodes into updates of the LoRA policy.

A thin adapter from episodes to the training core. Reads top to bottom as the algorithm:
returns -> (KL in reward) -> advantages -> token rows (old, reference and importance
weights) -> epochs x mini-batches of one optimiser step each (src.training.learner).
The maths is in src.training (advantages, policy_losses, aggregation, kl, mismatch).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from src.callbacks.callback import BatchContext, EpisodeTrainer, TrainingSchedule
from src.language_models.language_model import TrainableLanguageModel
from src.maths.groups import group_statistics, zero_spread
from src.records.episode import Episode, EpisodeStatus, Outcome
from src.records.trajectory import Trajectory
from src.training.advantages import ADVANTAGE_ESTIMATORS, Reinforce, whiten
from src.training.checkpoints import improves, mark_best
from src.training.kl import kl_penalty
from src.training.kl_control import KLController
from src.training.learner import Learner
from src.training.mismatch import MismatchCorrection, effective_sample_size
from src.training.objectives import PolicyObjective
from src.training.policy_losses import POLICY_LOSSES, ClipRange
from src.training.reference_policy import ReferencePolicy
from src.training.settings import (
    AdvantageSettings,
    KLSettings,
    MismatchSettings,
    OptimizerSettings,
    PPOSettings,
    RewardSettings,
)
from src.training.sharded_learner import ShardedLearner
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows

logger = logging.getLogger(__name__)

Algorithm = Literal["grpo", "dr_grpo", "rloo", "reinforce"]
MAX_POLICY_STALENESS = 0  # the default: only episodes of the current policy


def _merge_flat(group: Any, group_name: str, flat: dict[str, Any]) -> Any:
    """LifelongAgentBench's flat names (`learning_rate: 1e-5` beside the groups) into their group;
    the same setting given both ways with different values is an error."""
    given = {key: value for key, value in flat.items() if value is not None}
    for key, value in given.items():
        if key in group.model_fields_set and getattr(group, key) != value:
            raise ValueError(f"'{group_name}.{key}' is {getattr(group, key)!r} but the flat "
                             f"name gives {value!r}: set it in one place")
    return group.model_validate(group.model_dump(exclude_unset=True) | given)


class RLTrainingCallback(EpisodeTrainer):
    """Online RL of the LoRA policy: after each batch, returns (with a KL penalty, if in
    the reward) -> advantages -> `ppo.epochs` passes over mini-batches, one optimiser step
    each. Settings come in groups (`advantage`, `ppo`, `kl`, `reward`, `optimizer`,
    `mismatch`), each a mapping whose unknown keys are errors; the flat names of
    LifelongAgentBench's configs work beside them, and a setting given both ways with
    different values is an error.

    The update scores each batch at the temperature it was sampled with (recorded by the
    agent), with LoRA dropout off, so that on policy the PPO ratio is 1; it refuses samples
    drawn greedily or with `top_p` < 1 (their log-probs are renormalised over the nucleus).
    Episodes whose environment or model failed are left out.

    Metrics: `reward`, `reward_std` (the mean of the groups' stds), `frac_reward_zero_std`,
    `advantage_abs_mean`, `completions/mean_length`, `completions/clipped_ratio`, `loss`,
    `grad_norm`, `learning_rate`, `kl`, `kl_coef`, `entropy`, `clip_ratio/*`,
    `policy_staleness/*`, `mismatch/*`, `policy_version`. Checkpoints go to
    callback_state/<callback id>/, with best/ as `best_metric` chooses among the figures
    the loop hands it at each commit.

    Trainer workers (`num_trainer_workers` >= 2): Ray actors that form one torch.distributed
    group (gloo on CPUs, NCCL on GPUs), shard the model's layers with FSDP and sum their
    gradients; two give the one-process adapter to 1e-5, and checkpoints keep the
    one-process format, so a run resumes with any number of workers. They join the Ray
    cluster already up in the process (a rollout pool's), which must have their CPUs and
    GPUs free (else the start fails after 10 minutes), or start a local one. They score
    too (old and reference log-probs); this process's policy takes the adapter back after
    each step, to sample with it or hand it to a rollout pool, and to save it. When the
    agent samples from a pool, nothing here needs the base weights: the run builds the
    policy without them (`base_weights: meta`, src.experiment.assembly)."""

    def __init__(
        self,
        language_model: TrainableLanguageModel,
        # the same as `advantage.estimator` (grpo, dr_grpo, rloo, reinforce)
        algorithm: Algorithm | None = None,
        advantage: AdvantageSettings | None = None,
        ppo: PPOSettings | None = None,
        kl: KLSettings | None = None,
        reward: RewardSettings | None = None,
        optimizer: OptimizerSettings | None = None,
        mismatch: MismatchSettings | None = None,
        # reward: the batch's training reward; or any figure logged at the step, an
        # evaluation's `selection/success_rate` say: the checkpoint with its highest value,
        # the earliest among equals, is copied to best/ (None: no best/)
        best_metric: str | None = "reward",
        # episodes sampled more than this many updates ago are dropped
        # (`policy_staleness/dropped`); None keeps all. Use 1 with `rollout.max_staleness: 1`
        max_policy_staleness: int | None = MAX_POLICY_STALENESS,
        seed: int = 0,  # seeds the shuffle of episodes into mini-batches
        num_trainer_workers: int = 1,  # >= 2: the update in that many FSDP workers
        cpus_per_trainer_worker: int = 1,
        gpus_per_trainer_worker: int = 0,  # 1: a GPU for each worker
        # LifelongAgentBench's flat names, each a key of one group:
        learning_rate: float | None = None,  # optimizer.learning_rate
        optimizer_class: str | None = None,  # optimizer.optimizer_class
        gradient_accumulation_steps: int | None = None,  # optimizer.gradient_accumulation_steps
        reward_weight: float | None = None,  # reward.weight
        reward_correct: float | None = None,  # reward.correct
        reward_incorrect: float | None = None,  # reward.incorrect
        reward_timeout: float | None = None,  # reward.timeout
    ) -> None:
        self.model = language_model
        self.advantage_settings = _merge_flat(advantage or AdvantageSettings(), "advantage",
                                              {"estimator": algorithm})
        self.ppo = ppo or PPOSettings()
        self.kl_settings = kl or KLSettings()
        self.reward = _merge_flat(reward or RewardSettings(), "reward", {
            "weight": reward_weight, "correct": reward_correct,
            "incorrect": reward_incorrect, "timeout": reward_timeout})
        self.optimizer_settings = _merge_flat(optimizer or OptimizerSettings(), "optimizer", {
            "learning_rate": learning_rate, "optimizer_class": optimizer_class,
            "gradient_accumulation_steps": gradient_accumulation_steps})
        self.mismatch = mismatch or MismatchSettings()
        self.best_metric = best_metric
        self.max_policy_staleness = max_policy_staleness
        self.seed = seed

        settings = self.advantage_settings
        self.estimator = (Reinforce(settings.reinforce_baseline, settings.baseline_decay)
                          if settings.estimator == "reinforce"
                          else ADVANTAGE_ESTIMATORS[settings.estimator]())
        self.policy_loss = POLICY_LOSSES[self.ppo.loss](ClipRange(
            self.ppo.clip_ratio_low, self.ppo.clip_ratio_high, self.ppo.dual_clip))
        self.correction = MismatchCorrection(self.mismatch.correction, self.mismatch.level,
                                             self.mismatch.threshold)
        self.kl = KLController(kind=self.kl_settings.controller, beta=self.kl_settings.coef,
                               target=self.kl_settings.target, horizon=self.kl_settings.horizon)
        self.reference = ReferencePolicy(language_model, self.kl_settings.reference)
        # More than one worker: the update and the scoring run in that many FSDP worker
        # processes (src.training.sharded_learner).
        self.learner: Learner | ShardedLearner = (
            Learner(language_model, self.optimizer_settings) if num_trainer_workers == 1
            else ShardedLearner(language_model, self.optimizer_settings, num_trainer_workers,
                                cpus_per_trainer_worker, gpus_per_trainer_worker))
        self.best_value: float | None = None
        self._new_best: dict[str, Any] | None = None  # the step being committed's, if best

    @classmethod
    def adapter_only_models(cls, parameters: Mapping[str, object]) -> frozenset[str]:
        # trainer workers score and update; this process only takes the adapter back
        workers = int(parameters.get("num_trainer_workers", 1))  # type: ignore[call-overload]
        return frozenset({"language_model"}) if workers >= 2 else frozenset()

    @classmethod
    def oldest_trained(cls, parameters: Mapping[str, object]) -> int | None:
        kept = parameters.get("max_policy_staleness", MAX_POLICY_STALENESS)
        return kept if kept is None else int(kept)  # type: ignore[call-overload]

    # ---- schedule ------------------------------------------------------------------
    def prepare(self, schedule: TrainingSchedule) -> None:
        # optimiser steps per batch: one per mini-batch per epoch (a batch with fewer
        # episodes takes fewer, and the schedule then stops short of its end)
        mini_batches = 1
        if self.ppo.mini_batch_size:
            mini_batches = math.ceil(schedule.episodes_per_batch / self.ppo.mini_batch_size)
        self.learner.schedule(schedule.total_batches * self.ppo.epochs * mini_batches)

    # ---- returns -------------------------------------------------------------------
    def episode_return(self, episode: Episode) -> float:
        """The task's return: the episode's reward, or the outcome rewards."""
        if self.reward.source == "task":
            value = episode.reward
        elif episode.outcome is Outcome.CORRECT:
            value = self.reward.correct
        elif episode.status is EpisodeStatus.TASK_LIMIT_REACHED:
            value = self.reward.timeout
        else:
            value = self.reward.incorrect
        return self.reward.weight * value

    # ---- the update ----------------------------------------------------------------
    def train(self, batch: BatchContext) -> dict[str, float]:
        # an episode whose environment or model failed says nothing about the policy
        episodes = [e for e in batch.episodes if not e.status.failed
                    and e.trajectory and e.trajectory.completion_token_count]
        # Staleness: how many updates the trainer is ahead of the policy that sampled.
        staleness = [self.model.policy_version - (e.trajectory.policy_version or 0)
                     for e in episodes]
        metrics: dict[str, float] = {
            "policy_staleness/max": float(max(staleness, default=0)),
            # the histogram: how many of the batch's episodes were s updates old
            **{f"policy_staleness/episodes_at_{s}": float(staleness.count(s))
               for s in sorted(set(staleness))},
            "failed_episodes/dropped": float(sum(e.status.failed for e in batch.episodes))}
        if self.max_policy_staleness is not None:
            fresh = [e for e, s in zip(episodes, staleness, strict=True)
                     if s <= self.max_policy_staleness]
            metrics["policy_staleness/dropped"] = float(len(episodes) - len(fresh))
            episodes = fresh
        if not episodes:
            return {"skipped_batches": 1.0, **metrics}
        trajectories = [episode.trajectory for episode in episodes]
        temperature = self._sampling_temperature(trajectories)
        rows = self._token_rows(trajectories)
        task_returns = torch.tensor([self.episode_return(e) for e in episodes],
                                    dtype=torch.float32)
        group_keys = sorted({(e.sample.sample_id, e.batch_index) for e in episodes})
        group_index = {key: i for i, key in enumerate(group_keys)}
        group_ids = torch.tensor([group_index[(e.sample.sample_id, e.batch_index)]
                                  for e in episodes])

        token_metrics = TokenMetrics()
        # With one optimiser step per batch, the trainer's log-probs before it come free
        # from the update's own forward; otherwise (and for a KL in the reward, which
        # needs them first) a scoring pass computes them.
        old_from_forward = (self.mismatch.old_logprobs == "trainer"
                            and self._one_step_per_batch(len(episodes))
                            and not self.kl_settings.in_reward)
        if self.mismatch.old_logprobs == "trainer" and not old_from_forward:
            rows.old_logprobs = self.learner.score(rows, temperature=temperature)
            assert rows.sampler_logprobs is not None
            rows.token_weights = self.correction.apply(
                rows.old_logprobs, rows.sampler_logprobs, rows.batch.loss_mask, token_metrics)

        returns = task_returns
        if self.kl.beta > 0 or self.kl_settings.in_reward:
            rows.ref_logprobs = self.reference.score(self.learner, rows, temperature)
        if self.kl_settings.in_reward and rows.ref_logprobs is not None:
            assert rows.old_logprobs is not None
            per_token = kl_penalty(rows.old_logprobs, rows.ref_logprobs,
                                   self.kl_settings.estimator) * rows.batch.loss_mask
            returns = task_returns - self.kl.beta * per_token.sum(-1)

        # Whether a group has spread is a property of the task's returns: a KL penalty in
        # the reward differs between members by noise alone.
        no_spread = zero_spread(task_returns, group_ids)
        rows.advantages = self._advantages(returns, group_ids, no_spread)
        keep = (~no_spread if self.advantage_settings.zero_std_groups == "drop"
                else torch.ones(len(episodes), dtype=torch.bool))
        _, group_std, _, _ = group_statistics(task_returns, group_ids)
        one_per_group = torch.tensor([int((group_ids == group).nonzero()[0])
                                      for group in group_ids.unique()])
        metrics.update({
            "reward": task_returns.mean().item(),
            # TRL's meaning: the mean over groups of each group's std
            "reward_std": group_std[one_per_group].mean().item(),
            "reward_std/batch": (task_returns.std(unbiased=True).item()
                                 if len(task_returns) > 1 else 0.0),
            "frac_reward_zero_std": no_spread.float().mean().item(),
            "advantage_abs_mean": rows.advantages.abs().mean().item(),
            "completions/mean_length": rows.batch.loss_mask.sum(-1).mean().item(),
            "completions/clipped_ratio": float(np.mean([t.truncated for t in trajectories])),
        })
        if self.kl_settings.in_reward:
            metrics["reward/with_kl_penalty"] = returns.mean().item()
        if keep.any():
            metrics.update(self._optimise(rows, keep, temperature, trajectories,
                                          token_metrics, old_from_forward))
        else:
            metrics.update(token_metrics.means())
        metrics.update(effective_sample_size(metrics))
        self.model.mark_updated()
        metrics["policy_version"] = float(self.model.policy_version)
        return metrics

    def _sampling_temperature(self, trajectories: list[Trajectory]) -> float:
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

    def _token_rows(self, trajectories: list[Trajectory]) -> TokenRows:
        """The trajectories' ids and loss masks, with the sampler's log-probs as the PPO
        ratio's "old" (replaced by the trainer's when mismatch.old_logprobs is trainer)."""
        masks = [list(t.loss_mask) for t in trajectories]
        if self.ppo.mask_truncated_completions:
            masks = [[0] * len(m) if t.truncated else m
                     for t, m in zip(trajectories, masks, strict=True)]
        rows = TokenRows.from_sequences([t.token_ids for t in trajectories], masks,
                                        pad_id=self.model.pad_id)
        sampler = torch.zeros_like(rows.batch.loss_mask)
        for row, trajectory in enumerate(trajectories):
            sampler[row, : len(trajectory.sampling_logprobs)] = torch.tensor(
                trajectory.sampling_logprobs)
        rows.sampler_logprobs = sampler
        rows.old_logprobs = sampler
        return rows

    def _advantages(self, returns: torch.Tensor, group_ids: torch.Tensor,
                    no_spread: torch.Tensor) -> torch.Tensor:
        settings = self.advantage_settings
        advantage = self.estimator(returns, group_ids)
        if settings.whiten:
            advantage = whiten(advantage)
        if settings.clip is not None:
            advantage = advantage.clamp(-settings.clip, settings.clip)
        if self.estimator.group_relative:  # after whitening too: no spread, no signal
            advantage = torch.where(no_spread, torch.zeros_like(advantage), advantage)
        return advantage

    def _norm_length(self, trajectories: list[Trajectory]) -> int | None:
        """Dr. GRPO's constant: the generation budget (max_new_tokens per sampled turn)."""
        if self.ppo.norm_length is not None:
            return self.ppo.norm_length
        budgets = [t.generation_budget for t in trajectories]
        return None if None in budgets else max(budgets)  # type: ignore[type-var]

    def _one_step_per_batch(self, episodes: int) -> bool:
        return self.ppo.epochs == 1 and (self.ppo.mini_batch_size is None
                                         or self.ppo.mini_batch_size >= episodes)

    def _optimise(self, rows: TokenRows, keep: torch.Tensor, temperature: float,
                  trajectories: list[Trajectory], token_metrics: TokenMetrics,
                  old_from_forward: bool) -> dict[str, float]:
        indices = keep.nonzero().squeeze(-1).tolist()
        mini_size = self.ppo.mini_batch_size or len(indices)
        shuffle = random.Random(f"{self.seed}-{self.learner.step}")
        objective = PolicyObjective(
            self.policy_loss, self.ppo.aggregation, self._norm_length(trajectories),
            kl_coef=0.0 if self.kl_settings.in_reward else self.kl.beta,
            kl_estimator=self.kl_settings.estimator, entropy_coeff=self.ppo.entropy_coeff,
            measure_drift=self.mismatch.old_logprobs == "sampler",
            old_from_forward=self.correction if old_from_forward else None)
        losses, norms = [], []
        for _ in range(self.ppo.epochs):
            order = list(indices)
            if self.ppo.epochs > 1 or mini_size < len(indices):
                shuffle.shuffle(order)
            for start in range(0, len(order), mini_size):
                step = self.learner.update(rows, order[start:start + mini_size], objective,
                                           token_metrics, temperature)
                objective.measure_drift = False  # only before the batch's first step
                losses.append(step.loss)
                norms.append(step.grad_norm)
        metrics = token_metrics.means()
        metrics.update({"loss": float(np.mean(losses)), "grad_norm": float(np.mean(norms)),
                        "learning_rate": self.learner.learning_rate,
                        "kl_coef": self.kl.beta})
        if "kl" in metrics:
            self.kl.update(metrics["kl"], n_steps=len(indices))
        return metrics

    # ---- state ---------------------------------------------------------------------
    def consider_best(self, step: int, figures: Mapping[str, float]) -> None:
        value = figures.get(self.best_metric) if self.best_metric else None
        self._new_best = None
        if improves(value, self.best_value):
            self.best_value = value
            self._new_best = {"metric": self.best_metric, "value": value, "step": step}

    def save_state(self, directory: Path) -> None:
        self.learner.save(directory, {
            "kl_coef": self.kl.beta,
            "running_baseline": self.estimator.state_dict().get("running_mean"),
            "best_metric": self.best_metric,
            "best_value": self.best_value,
        })
        if self._new_best is not None:  # copied to best/ once the batch is committed
            mark_best(directory, self._new_best)
            self._new_best = None

    def close(self) -> None:
        if isinstance(self.learner, ShardedLearner):
            self.learner.close()

    def restore_state(self, directory: Path) -> None:
        state = self.learner.restore(directory)
        self.kl.beta = state["kl_coef"]
        self.estimator.load_state_dict({"running_mean": state["running_baseline"]})
        self.best_value = state["best_value"]
