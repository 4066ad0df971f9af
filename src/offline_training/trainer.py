"""Offline group training: RCE warm-up epochs, then GRPO epochs, over fixed scored groups.

Reads top to bottom as the algorithm. Before any update: the reference log-probs (base
model, adapter off). Warm-up epochs: L = sum_i w_i CE(pi_theta, y_i), w = softmax(s / tau),
tau linear 2.0 -> 0.5, at 0.1x the learning rate. At the start of GRPO: the old log-probs,
frozen. GRPO epochs: PPO clip loss on z-scored, clipped advantages + beta * KL(k3) to the
reference, the top-k candidates of each group in the first epochs, all later; beta follows
the band rule once per epoch. After every epoch: the best-vs-worst log-likelihood margin
and the KL on all groups, a checkpoint, and best/. The maths is in
src.training.offline_groups and the training core (src.training.learner).

Files under output_dir/training_state/:
  reference_logprobs/, old_logprobs/   frozen per-token log-probs (one tensor per candidate)
  checkpoint-NNNNNN/, best/            after epoch N, in the layout of every pipeline
                                       (src.run.protocol; best/ per `best_rule`),
                                       the last 3 kept
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch
from tqdm import tqdm

from src.language_models.language_model import TrainableLanguageModel
from src.offline_training.config import OfflineTrainingConfig
from src.offline_training.groups import ScoredGroup, tokenize_groups
from src.run.folder import TRAINING_STATE, RunDirectory, RunState
from src.run.metrics import MetricsLog
from src.run.protocol import BestRule, Part
from src.run.step_loop import StepReport, Steps, evaluate_apart, run_steps
from src.storage.checkpoint_store import CheckpointStore
from src.storage.files import atomic_directory
from src.storage.state import Stateful
from src.training.kl import kl_penalty
from src.training.kl_control import KLController
from src.training.learner import Learner, Objective, StepResult
from src.training.objectives import CrossEntropyObjective, PolicyObjective
from src.training.offline_groups import (
    best_minus_worst,
    curriculum_candidates,
    group_advantages,
    rce_tau,
    softmax_weights,
)
from src.training.policy_losses import ClipRange, PPOClip
from src.training.safe_load import load_plain
from src.training.settings import OptimizerSettings
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows
from src.training.training_state import TRAINING_STEP

Phase = Literal["rce", "grpo"]
MARGIN = "logp_margin/best_minus_worst"


def best_rule(kl_limit: float) -> BestRule:
    """The best/ rule: among the epochs whose KL to the reference (k3, measured on all groups
    after the epoch) stays within the band's upper edge `kl_limit`, the one with the largest
    best-vs-worst margin; an earlier epoch wins a tie. Where no epoch qualifies there is no
    best/: a larger margin bought by drifting far from the base model is not trusted."""
    return BestRule(MARGIN, bound=("kl", kl_limit), step_key="epoch")


class OfflineGroupTrainer(Steps, Stateful):
    unit = "epoch"

    def __init__(self, config: OfflineTrainingConfig, language_model: TrainableLanguageModel,
                 groups: list[ScoredGroup], output_dir: Path,
                 evaluate: Callable[..., dict[str, float]] | None = None,
                 show_progress: bool = True) -> None:
        self.config = config
        self.model = language_model
        self.data = tokenize_groups(groups, language_model, config.system_prompt)
        self.rows = TokenRows.from_sequences(self.data.sequences, self.data.masks,
                                             pad_id=language_model.pad_id)
        self.group_scores = [group.scores for group in groups]
        self.state_dir = output_dir / TRAINING_STATE
        self.store = CheckpointStore(self.state_dir)
        self.metrics = MetricsLog(output_dir)
        self.evaluator = evaluate
        self.show_progress = show_progress
        grpo = config.grpo
        self.advantage = group_advantages(self.data.scores, self.data.group_ids,
                                          grpo.advantage_clip)
        self.kl = KLController(kind="band", beta=grpo.kl_coef, band_low=grpo.kl_band_low,
                               band_high=grpo.kl_band_high, band_factor=grpo.kl_band_factor)
        self.steps_per_epoch = math.ceil(len(groups) / config.training.groups_per_step)
        self.total = config.warmup.epochs + grpo.epochs  # epochs
        self.epoch = 0  # the last epoch trained
        self.reference: list[torch.Tensor] = []
        self.old: list[torch.Tensor] = []
        self.phase: Phase | None = None
        # scores before any phase starts; each phase brings its own optimiser
        self.learner = Learner(language_model, self._optimizer_settings(
            config.training.learning_rate))

    # ---- the steps, as the step loop runs them -------------------------------------
    def train(self, run: RunDirectory, state: RunState) -> dict:
        """Train the epochs after the last committed one (`state.completed_batches` counts
        epochs here), committing each with its checkpoint; return the run's summary."""
        return run_steps(self, run, state, self.show_progress)

    def parts(self) -> list[Part]:
        return [Part(self.store, self, best_rule(self.config.grpo.kl_band_high))]

    def restored(self, done: int) -> None:
        # The base model never changes: its log-probs are taken once, before any update.
        self.reference = self._frozen("reference_logprobs",
                                      lambda: self._score(with_adapter=False))

    def progress_bar(self, done: int, show: bool) -> tqdm:
        """In optimiser steps: an epoch is many."""
        return tqdm(total=self.total * self.steps_per_epoch, initial=done * self.steps_per_epoch,
                    unit="step", disable=not show, dynamic_ncols=True)

    def at_start(self) -> dict[str, float]:
        figures = self._measure() | {"kl_coef": self.kl.beta}
        return figures | self.evaluate(0) if self.evaluator is not None else figures

    def step(self, step: int, progress: tqdm) -> StepReport:
        """Epoch `step`: its phase's updates, then the margin and KL on all groups."""
        if self._phase_of(step) == "rce":
            figures = self._rce_epoch(step, progress)
        else:
            if not self.old:  # PPO's old policy: the one GRPO starts from, frozen
                self.old = self._frozen("old_logprobs", lambda: self._score(with_adapter=True))
            figures = self._grpo_epoch(step, progress)
        measured = self._measure()
        if self._phase_of(step) == "grpo":
            self.kl.update(measured["kl"])  # the band rule, once per epoch
        self.epoch = step
        return StepReport(figures | measured)

    def evaluation_due(self, step: int) -> bool:
        return self.evaluator is not None

    def evaluate(self, step: int) -> dict[str, float]:
        assert self.evaluator is not None  # evaluation_due says so
        return evaluate_apart(self.evaluator, step, self.metrics)

    def _phase_of(self, epoch: int) -> Phase:
        return "rce" if epoch <= self.config.warmup.epochs else "grpo"

    # ---- scoring -------------------------------------------------------------------
    def _score(self, with_adapter: bool) -> list[torch.Tensor]:
        """Per candidate, the log-probs of its own tokens (a 1-D tensor on the CPU)."""
        scores = self.learner.score(self.rows, temperature=self.config.training.temperature,
                                    with_adapter=with_adapter)
        mask = self.rows.batch.loss_mask > 0
        return [scores[row][mask[row]] for row in range(len(self.rows))]

    def _frozen(self, name: str, compute: Callable[[], list[torch.Tensor]]
                ) -> list[torch.Tensor]:
        """Log-probs computed once and kept in the state folder, so that a resumed run uses
        exactly the ones the interrupted run trained against."""
        path = self.state_dir / name / "logprobs.pt"
        if path.is_file():
            return load_plain(path)
        values = compute()
        with atomic_directory(path.parent) as folder:
            torch.save(values, folder / path.name)
        return values

    def _measure(self) -> dict[str, float]:
        """On all groups, no gradient: the headline margin, the KL to the reference (k3,
        token mean) and the mean per-token log-likelihood."""
        current = self._score(with_adapter=True)
        mean_logp = [values.mean().item() for values in current]
        margins = [best_minus_worst([mean_logp[row] for row in rows], scores)
                   for rows, scores in zip(self.data.rows_of_group, self.group_scores,
                                           strict=True)]
        margins = [margin for margin in margins if margin is not None]
        tokens = torch.cat(current)
        kl = kl_penalty(tokens, torch.cat(self.reference), self.config.grpo.kl_estimator)
        metrics = {"kl": kl.mean().item(), "logp/token_mean": tokens.mean().item()}
        if margins:
            metrics[MARGIN] = statistics.fmean(margins)
        return metrics

    # ---- optimisation ----------------------------------------------------------------
    def _optimizer_settings(self, learning_rate: float) -> OptimizerSettings:
        training = self.config.training
        return OptimizerSettings(learning_rate=learning_rate,
                                 weight_decay=training.weight_decay,
                                 max_grad_norm=training.max_grad_norm,
                                 micro_batch_max_tokens=training.micro_batch_max_tokens)

    def _enter_phase(self, phase: Phase) -> None:
        """Each phase has its own AdamW and schedule: the RCE moments say nothing about
        the GRPO loss. RCE: constant 0.1x lr; GRPO: linear warmup then cosine."""
        if self.phase == phase:
            return
        training = self.config.training
        if phase == "rce":
            self.learner = Learner(self.model, self._optimizer_settings(
                training.learning_rate * self.config.warmup.learning_rate_scale))
            self.learner.schedule(self.config.warmup.epochs * self.steps_per_epoch, 0.0,
                                  "constant")
        else:
            self.learner = Learner(self.model, self._optimizer_settings(training.learning_rate))
            self.learner.schedule(self.config.grpo.epochs * self.steps_per_epoch,
                                  self.config.grpo.warmup_ratio, "cosine")
        self.phase = phase

    def _mini_batches(self, epoch: int) -> list[list[int]]:
        """Groups in a seeded shuffled order, `groups_per_step` at a time."""
        order = list(range(len(self.data.rows_of_group)))
        random.Random(f"{self.config.random_seed}-{epoch}").shuffle(order)
        size = self.config.training.groups_per_step
        return [order[start:start + size] for start in range(0, len(order), size)]

    def _step(self, rows: list[int], objective: Objective, metrics: TokenMetrics,
              progress: tqdm, phase: Phase) -> StepResult:
        """One optimiser step over the candidate rows `rows` (a mini-batch of groups)."""
        step = self.learner.update(self.rows, rows, objective, metrics,
                                   self.config.training.temperature)
        self.model.mark_updated()
        progress.update(1)
        progress.set_postfix(phase=phase, loss=f"{step.loss:.3f}")
        return step

    @staticmethod
    def _step_means(steps: list[StepResult]) -> dict[str, float]:
        return {"loss": statistics.fmean(step.loss for step in steps),
                "grad_norm": statistics.fmean(step.grad_norm for step in steps),
                "learning_rate": steps[-1].learning_rate}

    def _rce_epoch(self, epoch: int, progress: tqdm) -> dict[str, float]:
        self._enter_phase("rce")
        warmup = self.config.warmup
        total_steps = warmup.epochs * self.steps_per_epoch
        steps: list[StepResult] = []
        taus: list[float] = []
        metrics = TokenMetrics()
        for index, groups in enumerate(self._mini_batches(epoch)):
            tau = rce_tau((epoch - 1) * self.steps_per_epoch + index, total_steps,
                          warmup.tau_start, warmup.tau_end)
            rows = [row for group in groups for row in self.data.rows_of_group[group]]
            weights = torch.zeros(len(self.rows))
            for group in groups:
                members = self.data.rows_of_group[group]
                weights[members] = softmax_weights(self.data.scores[members], tau)
            self.rows.row_weights = weights
            # each group's weights sum to 1: the loss is a mean over the groups
            objective = CrossEntropyObjective("seq-mean-token-sum", num_sequences=len(groups))
            steps.append(self._step(rows, objective, metrics, progress, "rce"))
            taus.append(tau)
        return self._step_means(steps) | {"tau": statistics.fmean(taus), "tau/last": taus[-1]}

    def _grpo_epoch(self, epoch: int, progress: tqdm) -> dict[str, float]:
        self._enter_phase("grpo")
        grpo = self.config.grpo
        grpo_epoch = epoch - self.config.warmup.epochs - 1
        selected = [[rows[index] for index in curriculum_candidates(
                        scores, grpo_epoch, grpo.top_k, grpo.top_k_epochs)]
                    for rows, scores in zip(self.data.rows_of_group, self.group_scores,
                                            strict=True)]
        self.rows.advantages = self.advantage
        self.rows.old_logprobs = self.rows.aligned(self.old)
        self.rows.ref_logprobs = self.rows.aligned(self.reference)
        # beta is fixed within the epoch; the band rule moves it after. The normalising
        # length of seq-mean-token-sum-norm is each mini-batch's longest candidate.
        objective = PolicyObjective(
            PPOClip(ClipRange(grpo.clip_ratio_low, grpo.clip_ratio_high, grpo.dual_clip)),
            grpo.loss_aggregation, kl_coef=self.kl.beta, kl_estimator=grpo.kl_estimator,
            with_entropy=False)
        steps: list[StepResult] = []
        metrics = TokenMetrics()
        for groups in self._mini_batches(epoch):
            rows = [row for group in groups for row in selected[group]]
            steps.append(self._step(rows, objective, metrics, progress, "grpo"))
        means = metrics.means()
        return self._step_means(steps) | {
            "train/kl": means["kl"],
            "clip_ratio": means["clip_ratio/low_mean"] + means["clip_ratio/high_mean"],
            "kl_coef": objective.kl_coef,
            "candidates": float(sum(len(rows) for rows in selected)),
            "advantage_abs_mean": self.advantage[[row for rows in selected for row in rows]]
            .abs().mean().item(),
        }

    # ---- state, as the run protocol saves and restores it -----------------------------
    def save_state(self, directory: Path) -> None:
        self.learner.save(directory, {"epoch": self.epoch, "phase": self.phase,
                                      "kl_coef": self.kl.beta})

    def restore_state(self, directory: Path) -> None:
        saved = json.loads((directory / TRAINING_STEP).read_text(encoding="utf-8"))
        self.epoch, phase = saved["epoch"], saved["phase"]
        # Mid-phase, the optimiser goes on where it stopped; a new phase starts afresh.
        mid_phase = self.epoch < self.total and self._phase_of(self.epoch + 1) == phase
        if mid_phase:
            self._enter_phase(phase)
        state = self.learner.restore(directory, restore_optimizer=mid_phase)
        self.kl.beta = state["kl_coef"]
