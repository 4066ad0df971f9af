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

import numpy as np
import torch

from src.configuration.components import COMPONENTS
from src.language_models.language_model import TrainableLanguageModel
from src.maths.groups import zero_spread
from src.online_training.trajectory_rows import batch_figures, sampling_temperature, token_rows
from src.records.episode import Episode
from src.records.trajectory import Trajectory
from src.run.protocol import BestRule
from src.run.trainer import BatchContext, Trainer, TrainingSchedule
from src.training.advantages import ADVANTAGE_ESTIMATORS, Reinforce, whiten
from src.training.distillation import Teacher
from src.training.kl import kl_penalty
from src.training.kl_control import KLController
from src.training.learner import Learner
from src.training.mismatch import MismatchCorrection, effective_sample_size
from src.training.objectives import PolicyObjective
from src.training.policy_losses import POLICY_LOSSES, ClipRange
from src.training.reference_policy import ReferencePolicy
from src.training.settings import (
    AdvantageSettings,
    DistillationSettings,
    KLSettings,
    MismatchSettings,
    OptimizerSettings,
    PPOSettings,
    RewardSettings,
    TrainerWorkerSettings,
    loss_aggregation,
)
from src.training.sharded_learner import ShardedLearner
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows

logger = logging.getLogger(__name__)

MAX_POLICY_STALENESS = 0  # the default: only episodes of the current policy


@COMPONENTS.register("rl_training")
class RLTrainer(Trainer):
    """Online RL of the LoRA policy: after each batch, returns (with a KL penalty, if in
    the reward) -> advantages -> `ppo.epochs` passes over mini-batches, one optimiser step
    each. Settings come in groups (`advantage`, `ppo`, `kl`, `reward`, `optimizer`,
    `mismatch`, `trainer_workers`, `distillation`), each a mapping whose unknown keys are
    errors. The return is the task's reward times `reward.weight`: outcome rewards are the
    task's.
    LifelongAgentBench's flat names (`algorithm`, `learning_rate`, ...) are read as these
    groups' keys where a config is read (src.online_training.flat_names).

    The update scores each batch at the temperature it was sampled with (recorded by the
    agent), with LoRA dropout off, so that on policy the PPO ratio is 1; it refuses samples
    drawn greedily or with `top_p` < 1 (their log-probs are renormalised over the nucleus).
    Episodes whose environment or model failed are left out.

    On-policy distillation (`teacher`: a language model of the run that scores tokens in
    this process, with the student's tokenizer): the teacher scores the student's sampled
    rows in the update's micro-batches, and each agent token's advantage is
    `distillation.weight` x (teacher - student log-prob) plus `distillation.reward_weight`
    x the task's advantage (src.training.distillation). The teacher is frozen: nothing of
    it is trained or saved. Not with trainer workers, nor with `zero_std_groups: drop`
    (a group of equal task returns still has the teacher's signal).

    Metrics: `reward`, `reward_std` (the mean of the groups' stds), `frac_reward_zero_std`,
    `advantage_abs_mean`, `completions/mean_length`, `completions/clipped_ratio`, `loss`,
    `grad_norm`, `learning_rate`, `kl`, `kl_coef`, `entropy`, `clip_ratio/*`,
    `policy_staleness/*`, `mismatch/*`, `policy_version`; with a teacher
    `distillation/reverse_kl` (the mean per agent token of student minus teacher log-prob,
    an estimate of the reverse KL), `distillation/teacher_logprob` and
    `distillation/advantage_abs_mean` (per agent token); `update_skipped`: how many of
    the batch's optimiser steps went without a forward and backward (every advantage of
    the mini-batch 0 and nothing else in the loss: `Learner.skips_forward`). Such a step
    still steps the optimiser, on zero gradients, as the scored step would; the figures
    only a forward measures (loss, entropy, ratios, mismatch) are then left out.
    Checkpoints go to callback_state/<callback id>/, with best/ as `best_metric` chooses
    among the figures the loop hands it at each commit.

    Trainer workers (`trainer_workers.count` >= 2): Ray actors that form one torch.distributed
    group (gloo on CPUs, NCCL on GPUs), shard the model's layers with FSDP and sum their
    gradients; two give the one-process adapter to 1e-5, and checkpoints keep the
    one-process format, so a run resumes with any number of workers. They join the Ray
    cluster already up in the process (a rollout pool's), which must have their CPUs and
    GPUs free (else the start fails after 10 minutes), or start a local one. They score
    too (old and reference log-probs); this process's policy takes the adapter back after
    each step, to sample with it or hand it to a rollout pool, and to save it. When the
    agent samples from a pool, nothing here needs the base weights: the run builds the
    policy without them (`base_weights: meta`, src.run.assembly)."""

    def __init__(
        self,
        language_model: TrainableLanguageModel,
        advantage: AdvantageSettings | None = None,
        ppo: PPOSettings | None = None,
        kl: KLSettings | None = None,
        reward: RewardSettings | None = None,
        optimizer: OptimizerSettings | None = None,
        mismatch: MismatchSettings | None = None,
        trainer_workers: TrainerWorkerSettings | None = None,  # count >= 2: FSDP workers
        # on-policy distillation: the language model (by name) whose log-probs of the
        # student's sampled tokens are the advantage (`distillation`); None: plain RL
        teacher: TrainableLanguageModel | None = None,
        distillation: DistillationSettings | None = None,  # how its advantage is weighed
        # reward: the batch's training reward; or any figure logged at the step, an
        # evaluation's `selection/success_rate` say: the checkpoint with its highest value,
        # the earliest among equals, is copied to best/ (None: no best/)
        best_metric: str | None = "reward",
        # episodes sampled more than this many updates ago are dropped
        # (`policy_staleness/dropped`); None keeps all. Use 1 with `rollout.max_staleness: 1`
        max_policy_staleness: int | None = MAX_POLICY_STALENESS,
        seed: int = 0,  # seeds the shuffle of episodes into mini-batches
    ) -> None:
        self.model = language_model
        self.advantage_settings = advantage or AdvantageSettings()
        self.ppo = ppo or PPOSettings()
        self.kl_settings = kl or KLSettings()
        self.reward = reward or RewardSettings()
        self.optimizer_settings = optimizer or OptimizerSettings()
        self.mismatch = mismatch or MismatchSettings()
        workers = trainer_workers or TrainerWorkerSettings()
        self.teacher = Teacher.of(teacher, self.model, distillation, workers.count,
                                  self.advantage_settings.zero_std_groups)
        self.best_metric = best_metric
        self.max_policy_staleness = max_policy_staleness
        self.seed = seed

        settings = self.advantage_settings
        self.estimator = (Reinforce(settings.reinforce_baseline, settings.baseline_decay)
                          if settings.estimator == "reinforce"
                          else ADVANTAGE_ESTIMATORS[settings.estimator]())
        self.policy_loss = POLICY_LOSSES[self.ppo.loss](ClipRange(
            self.ppo.clip_ratio_low, self.ppo.clip_ratio_high, self.ppo.dual_clip))
        self.aggregation = loss_aggregation(self.ppo, settings)
        self.correction = MismatchCorrection(self.mismatch.correction, self.mismatch.level,
                                             self.mismatch.threshold)
        self.kl = KLController(kind=self.kl_settings.controller, beta=self.kl_settings.coef,
                               target=self.kl_settings.target, horizon=self.kl_settings.horizon)
        self.reference = ReferencePolicy(language_model, self.kl_settings.reference)
        # More than one worker: the update and the scoring run in that many FSDP worker
        # processes (src.training.sharded_learner).
        self.learner: Learner | ShardedLearner = (
            Learner(language_model, self.optimizer_settings) if workers.count == 1
            else ShardedLearner(language_model, self.optimizer_settings, workers.count,
                                workers.cpus_per_worker, workers.gpus_per_worker))

    @classmethod
    def adapter_only_models(cls, parameters: Mapping[str, object]) -> frozenset[str]:
        # trainer workers score and update; this process only takes the adapter back
        workers = TrainerWorkerSettings.model_validate(parameters.get("trainer_workers") or {})
        return frozenset({"language_model"}) if workers.count >= 2 else frozenset()

    @classmethod
    def frozen_models(cls, parameters: Mapping[str, object]) -> frozenset[str]:
        return frozenset({"teacher"})

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
        """The task's return: the episode's reward, weighted."""
        return self.reward.weight * episode.reward

    # ---- the update ----------------------------------------------------------------
    def train(self, batch: BatchContext) -> dict[str, float]:
        episodes, metrics = self._episodes_to_train(batch)
        if not episodes:
            return {"skipped_batches": 1.0, **metrics}
        trajectories = [episode.trajectory for episode in episodes]
        temperature = sampling_temperature(trajectories)
        rows, cut = token_rows(trajectories, self.model, self.ppo.mask_truncated_completions)
        if cut:  # only where it happened: a figure that is always 0 would say nothing
            metrics["rows/cut_to_context"] = float(cut)
        task_returns = torch.tensor([self.episode_return(e) for e in episodes],
                                    dtype=torch.float32)
        group_keys = sorted({(e.sample.sample_id, e.batch_index) for e in episodes})
        group_index = {key: i for i, key in enumerate(group_keys)}
        group_ids = torch.tensor([group_index[(e.sample.sample_id, e.batch_index)]
                                  for e in episodes])

        token_metrics = TokenMetrics()
        old_from_forward = self._old_logprobs(rows, len(episodes), temperature, token_metrics)
        returns = self._returns(rows, task_returns, temperature)
        # Whether a group has spread is a property of the task's returns: a KL penalty in
        # the reward differs between members by noise alone.
        no_spread = zero_spread(task_returns, group_ids)
        rows.advantages = self._advantages(returns, group_ids, no_spread)
        if self.teacher is not None:
            assert isinstance(self.learner, Learner)  # a teacher refuses trainer workers
            metrics.update(self.teacher.grade(self.learner, rows, temperature).metrics)
        keep = (~no_spread if self.advantage_settings.zero_std_groups == "drop"
                else torch.ones(len(episodes), dtype=torch.bool))
        metrics.update(batch_figures(task_returns, group_ids, no_spread, rows, trajectories))
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

    def _episodes_to_train(self, batch: BatchContext) -> tuple[list[Episode], dict[str, float]]:
        """The batch's episodes an update learns from, and the staleness figures."""
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
        return episodes, metrics

    def _old_logprobs(self, rows: TokenRows, episodes: int, temperature: float,
                      token_metrics: TokenMetrics) -> bool:
        """The trainer's log-probs before the update, where they are the old policy's;
        whether the update's own forward gives them instead. With one optimiser step per
        batch they come free from that forward; otherwise (and for a KL in the reward,
        which needs them first) a scoring pass computes them."""
        old_from_forward = (self.mismatch.old_logprobs == "trainer"
                            and self._one_step_per_batch(episodes)
                            and not self.kl_settings.in_reward)
        if self.mismatch.old_logprobs == "trainer" and not old_from_forward:
            rows.old_logprobs = self.learner.score(rows, temperature=temperature)
            assert rows.sampler_logprobs is not None
            rows.token_weights = self.correction.apply(
                rows.old_logprobs, rows.sampler_logprobs, rows.batch.loss_mask, token_metrics)
        return old_from_forward

    def _returns(self, rows: TokenRows, task_returns: torch.Tensor,
                 temperature: float) -> torch.Tensor:
        """The task's returns, less the KL penalty where the KL is in the reward; the
        reference's log-probs into `rows` wherever a KL is used."""
        if self.kl.beta > 0 or self.kl_settings.in_reward:
            rows.ref_logprobs = self.reference.score(self.learner, rows, temperature)
        if not (self.kl_settings.in_reward and rows.ref_logprobs is not None):
            return task_returns
        assert rows.old_logprobs is not None
        per_token = kl_penalty(rows.old_logprobs, rows.ref_logprobs,
                               self.kl_settings.estimator) * rows.batch.loss_mask
        return task_returns - self.kl.beta * per_token.sum(-1)

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
        """Dr. GRPO's constant: `ppo.norm_length`, else the agent's max_new_tokens (its
        configured budget of a reply), the same in every batch whatever its episodes'
        turns (None where no trajectory records a budget)."""
        if self.ppo.norm_length is not None:
            return self.ppo.norm_length
        budgets = {t.max_new_tokens for t in trajectories}
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
            self.policy_loss, self.aggregation, self._norm_length(trajectories),
            kl_coef=0.0 if self.kl_settings.in_reward else self.kl.beta,
            kl_estimator=self.kl_settings.estimator, entropy_coeff=self.ppo.entropy_coeff,
            measure_drift=self.mismatch.old_logprobs == "sampler",
            old_from_forward=self.correction if old_from_forward else None)
        losses, norms, skipped = [], [], 0
        for _ in range(self.ppo.epochs):
            order = list(indices)
            if self.ppo.epochs > 1 or mini_size < len(indices):
                shuffle.shuffle(order)
            for start in range(0, len(order), mini_size):
                step = self.learner.update(rows, order[start:start + mini_size], objective,
                                           token_metrics, temperature)
                objective.measure_drift = False  # only before the batch's first step
                # a step the learner takes on zero gradients without scoring measures no
                # loss, ratio, entropy or mismatch: its figures are left out, not zeros
                skipped += not step.scored
                if step.scored:
                    losses.append(step.loss)
                norms.append(step.grad_norm)
        metrics = token_metrics.means()
        if losses:
            metrics["loss"] = float(np.mean(losses))
        metrics.update({"update_skipped": float(skipped), "grad_norm": float(np.mean(norms)),
                        "learning_rate": self.learner.learning_rate,
                        "kl_coef": self.kl.beta})
        if "kl" in metrics:
            self.kl.update(metrics["kl"], n_steps=len(indices))
        return metrics

    # ---- state ---------------------------------------------------------------------
    @property
    def best_rule(self) -> BestRule | None:
        return BestRule(self.best_metric) if self.best_metric else None

    def save_state(self, directory: Path) -> None:
        self.learner.save(directory, {
            "kl_coef": self.kl.beta,
            "running_baseline": self.estimator.state_dict().get("running_mean"),
        })

    def close(self) -> None:
        if isinstance(self.learner, ShardedLearner):
            self.learner.close()

    def restore_state(self, directory: Path) -> None:
        state = self.learner.restore(directory)
        self.kl.beta = state["kl_coef"]
        self.estimator.load_state_dict({"running_mean": state["running_baseline"]})

