"""Offline group training: RCE warm-up epochs, then GRPO epochs, over fixed scored groups.

Reads top to bottom as the algorithm. Before any update: the reference log-probs (base
model, adapter off). Warm-up epochs: L = sum_i w_i CE(pi_theta, y_i), w = softmax(s / tau),
tau linear 2.0 -> 0.5, at 0.1x the learning rate. At the start of GRPO: the old log-probs,
frozen. GRPO epochs: PPO clip loss on z-scored, clipped advantages + beta * KL(k3) to the
reference, the top-k candidates of each group in the first epochs, all later; beta follows
the band rule once per epoch. After every epoch: the best-vs-worst log-likelihood margin
and the KL on all groups, a checkpoint, and best/. The maths is in
src.training.offline_groups and src.training.policy_gradient.

Files under output_dir/training_state/:
  reference_logprobs/, old_logprobs/   frozen per-token log-probs (one tensor per candidate)
  checkpoint-NNNNNN/                   after epoch N: lora_weights/, optimizer_state.pt,
                                       rng_state.pt, trainer_state.json
  best/                                lora_weights/ and best.json (see `is_new_best`)
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Literal

import torch
from tqdm import tqdm

from src.experiment.files import atomic_directory, atomic_write_json, remove_stale_temporaries
from src.experiment.metrics import MetricsLog
from src.experiment.run_directory import RunDirectory, RunState
from src.language_models.language_model import TokenBatch, TrainableLanguageModel
from src.offline_training.config import OfflineTrainingConfig
from src.offline_training.groups import ScoredGroup, tokenize_groups
from src.training.kl_control import KLController
from src.training.micro_batches import split_by_token_budget
from src.training.offline_groups import (
    best_minus_worst,
    curriculum_candidates,
    group_advantages,
    rce_loss,
    rce_tau,
    softmax_weights,
)
from src.training.optimisation import clipped_optimizer_step, learning_rate_factor
from src.training.policy_gradient import aggregate, kl_penalty, ppo_clip_loss
from src.training.rng_state import load_rng_state, save_rng_state

Phase = Literal["rce", "grpo"]
MARGIN = "logp_margin/best_minus_worst"


def is_new_best(best: dict[str, float] | None, margin: float | None, kl: float,
                kl_limit: float) -> bool:
    """The best/ rule: among the epochs whose KL to the reference (k3, measured on all groups
    after the epoch) stays within the band's upper edge `kl_limit`, the one with the largest
    best-vs-worst margin; an earlier epoch wins a tie. Where no epoch qualifies there is no
    best/: a larger margin bought by drifting far from the base model is not trusted."""
    if margin is None or kl > kl_limit:
        return False
    return best is None or margin > best[MARGIN]


class OfflineGroupTrainer:
    def __init__(self, config: OfflineTrainingConfig, language_model: TrainableLanguageModel,
                 groups: list[ScoredGroup], output_dir: Path,
                 evaluate: Callable[[int], dict[str, float]] | None = None,
                 show_progress: bool = True) -> None:
        self.config = config
        self.model = language_model
        self.data = tokenize_groups(groups, language_model, config.system_prompt)
        self.group_scores = [group.scores for group in groups]
        self.state_dir = output_dir / "training_state"
        self.metrics = MetricsLog(output_dir)
        self.evaluate = evaluate
        self.show_progress = show_progress
        grpo = config.grpo
        self.advantage = group_advantages(self.data.scores, self.data.group_ids,
                                          grpo.advantage_clip)
        self.kl = KLController(kind="band", beta=grpo.kl_coef, band_low=grpo.kl_band_low,
                               band_high=grpo.kl_band_high, band_factor=grpo.kl_band_factor)
        self.steps_per_epoch = math.ceil(len(groups) / config.training.groups_per_step)
        self.total_epochs = config.warmup.epochs + grpo.epochs
        self.best: dict[str, float] | None = None
        self.reference: list[torch.Tensor] = []
        self.old: list[torch.Tensor] = []
        self.phase: Phase | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None

    # ---- the run -------------------------------------------------------------------
    def train(self, run: RunDirectory, state: RunState) -> dict:
        """Train the epochs after the last committed one (`state.completed_batches` counts
        epochs here), committing each with its checkpoint; return the run's summary."""
        self.metrics.jsonl.truncate(state.metrics_bytes)  # drop rows of an unfinished epoch
        remove_stale_temporaries(self.state_dir)
        done = state.completed_batches
        if done:
            self._restore(done)
        all_rows = list(range(len(self.data.sequences)))
        # The base model never changes: its log-probs are taken once, before any update.
        self.reference = self._frozen("reference_logprobs",
                                      lambda: self._score(all_rows, with_adapter=False))
        if done == 0 and state.metrics_bytes == 0:
            metrics = self._measure() | {"kl_coef": self.kl.beta}
            self._log(0, metrics)
            state = RunState(metrics_bytes=self.metrics.jsonl.size)
            run.write_state(state)

        progress = tqdm(total=self.total_epochs * self.steps_per_epoch,
                        initial=done * self.steps_per_epoch, unit="step",
                        disable=not self.show_progress, dynamic_ncols=True)
        try:
            for epoch in range(done + 1, self.total_epochs + 1):
                if self._phase_of(epoch) == "rce":
                    metrics = self._rce_epoch(epoch, progress)
                else:
                    if not self.old:  # PPO's old policy: the one GRPO starts from, frozen
                        self.old = self._frozen(
                            "old_logprobs", lambda: self._score(all_rows, with_adapter=True))
                    metrics = self._grpo_epoch(epoch, progress)
                measured = self._measure()
                if self._phase_of(epoch) == "grpo":
                    self.kl.update(measured["kl"])  # the band rule, once per epoch
                self._consider_best(epoch, measured)
                self._log(epoch, metrics | measured)
                self._save_checkpoint(epoch)
                state = RunState(completed_batches=epoch, metrics_bytes=self.metrics.jsonl.size)
                run.write_state(state)
        finally:
            progress.close()
            self.metrics.close()
        summary = {"epochs": self.total_epochs, "best": self.best,
                   "final": self.metrics.jsonl.read()[-1]}
        run.write_summary(summary)
        run.write_state(state.model_copy(update={"finished": True}))
        return summary

    def _phase_of(self, epoch: int) -> Phase:
        return "rce" if epoch <= self.config.warmup.epochs else "grpo"

    def _log(self, epoch: int, metrics: dict[str, float]) -> None:
        if self.evaluate is not None:
            # Sampling reseeds torch; training's dropout must not depend on evaluation.
            with torch.random.fork_rng():
                metrics = metrics | self.evaluate(epoch)
        self.metrics.log(epoch, metrics)

    # ---- scoring -------------------------------------------------------------------
    def _batch(self, rows: list[int]) -> TokenBatch:
        return TokenBatch.from_sequences([self.data.sequences[row] for row in rows],
                                         [self.data.masks[row] for row in rows],
                                         pad_id=getattr(self.model, "pad_id", 0))

    def _micro_batches(self, rows: list[int]) -> list[list[int]]:
        return split_by_token_budget(rows, self.data.lengths,
                                     self.config.training.micro_batch_max_tokens)

    @torch.no_grad()
    def _score(self, rows: list[int], with_adapter: bool) -> list[torch.Tensor]:
        """Per row, the log-probs of its candidate tokens (a 1-D tensor on the CPU)."""
        self.model.eval_mode()
        scored: list[torch.Tensor] = []
        for micro in self._micro_batches(rows):
            batch = self._batch(micro)
            logprobs = self.model.score(batch, temperature=self.config.training.temperature,
                                        with_adapter=with_adapter).logprobs.cpu()
            scored += [logprobs[index][batch.loss_mask[index] > 0]
                       for index in range(len(micro))]
        return scored

    @staticmethod
    def _aligned(values: list[torch.Tensor], rows: list[int], batch: TokenBatch) -> torch.Tensor:
        """Per-candidate token values placed at their positions in `batch`."""
        full = torch.zeros_like(batch.loss_mask)
        full[batch.loss_mask > 0] = torch.cat([values[row] for row in rows])
        return full

    def _frozen(self, name: str, compute: Callable[[], list[torch.Tensor]]
                ) -> list[torch.Tensor]:
        """Log-probs computed once and kept in the state folder, so that a resumed run uses
        exactly the ones the interrupted run trained against."""
        path = self.state_dir / name / "logprobs.pt"
        if path.is_file():
            return torch.load(path)
        values = compute()
        with atomic_directory(path.parent) as folder:
            torch.save(values, folder / path.name)
        return values

    def _measure(self) -> dict[str, float]:
        """On all groups, no gradient: the headline margin, the KL to the reference (k3,
        token mean) and the mean per-token log-likelihood."""
        current = self._score(list(range(len(self.data.sequences))), with_adapter=True)
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
    def _enter_phase(self, phase: Phase) -> None:
        """Each phase has its own AdamW and schedule: the RCE moments say nothing about
        the GRPO loss. RCE: constant 0.1x lr; GRPO: linear warmup then cosine."""
        if self.phase == phase:
            return
        training = self.config.training
        if phase == "rce":
            total = self.config.warmup.epochs * self.steps_per_epoch
            learning_rate = training.learning_rate * self.config.warmup.learning_rate_scale
            factor = learning_rate_factor(0, total, "constant")
        else:
            total = self.config.grpo.epochs * self.steps_per_epoch
            learning_rate = training.learning_rate
            factor = learning_rate_factor(int(self.config.grpo.warmup_ratio * total), total,
                                          "cosine")
        self.optimizer = torch.optim.AdamW(self.model.trainable_parameters(), lr=learning_rate,
                                           weight_decay=training.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
        self.phase = phase

    def _step(self) -> tuple[float, float]:
        """One optimiser step: (learning rate used, gradient norm before clipping)."""
        assert self.optimizer is not None
        learning_rate = self.optimizer.param_groups[0]["lr"]
        norm = clipped_optimizer_step(self.optimizer, self.scheduler,
                                      self.model.trainable_parameters(),
                                      self.config.training.max_grad_norm)
        self.model.mark_updated()
        return learning_rate, norm

    def _mini_batches(self, epoch: int) -> list[list[int]]:
        """Groups in a seeded shuffled order, `groups_per_step` at a time."""
        order = list(range(len(self.data.rows_of_group)))
        random.Random(f"{self.config.random_seed}-{epoch}").shuffle(order)
        size = self.config.training.groups_per_step
        return [order[start:start + size] for start in range(0, len(order), size)]

    def _rce_epoch(self, epoch: int, progress: tqdm) -> dict[str, float]:
        self._enter_phase("rce")
        self.model.train_mode()
        warmup = self.config.warmup
        total_steps = warmup.epochs * self.steps_per_epoch
        losses, norms, taus = [], [], []
        learning_rate = 0.0
        for index, groups in enumerate(self._mini_batches(epoch)):
            tau = rce_tau((epoch - 1) * self.steps_per_epoch + index, total_steps,
                          warmup.tau_start, warmup.tau_end)
            rows = [row for group in groups for row in self.data.rows_of_group[group]]
            weights = torch.zeros(len(self.data.sequences))
            for group in groups:
                members = self.data.rows_of_group[group]
                weights[members] = softmax_weights(self.data.scores[members], tau)
            step_loss = 0.0
            for micro in self._micro_batches(rows):
                batch = self._batch(micro)
                logp = self.model.score(batch, temperature=self.config.training.temperature
                                        ).logprobs
                loss = rce_loss(logp, batch.loss_mask.to(logp.device),
                                weights[micro].to(logp.device), num_groups=len(groups))
                loss.backward()
                step_loss += loss.item()
            learning_rate, norm = self._step()
            losses.append(step_loss)
            norms.append(norm)
            taus.append(tau)
            progress.update(1)
            progress.set_postfix(phase="rce", loss=f"{step_loss:.3f}")
        return {"loss": statistics.fmean(losses), "grad_norm": statistics.fmean(norms),
                "learning_rate": learning_rate, "tau": statistics.fmean(taus),
                "tau/last": taus[-1]}

    def _grpo_epoch(self, epoch: int, progress: tqdm) -> dict[str, float]:
        self._enter_phase("grpo")
        self.model.train_mode()
        grpo = self.config.grpo
        grpo_epoch = epoch - self.config.warmup.epochs - 1
        beta = self.kl.beta  # fixed within the epoch; the band rule moves it after
        selected = [[rows[index] for index in curriculum_candidates(
                        scores, grpo_epoch, grpo.top_k, grpo.top_k_epochs)]
                    for rows, scores in zip(self.data.rows_of_group, self.group_scores,
                                            strict=True)]
        losses, norms = [], []
        token_sums = {"train/kl": 0.0, "clip_ratio": 0.0}
        token_count = 0.0
        learning_rate = 0.0
        for groups in self._mini_batches(epoch):
            rows = [row for group in groups for row in selected[group]]
            completion_lengths = [sum(self.data.masks[row]) for row in rows]
            reduce_over = partial(aggregate, mode=grpo.loss_aggregation,
                                  norm_length=max(completion_lengths), num_sequences=len(rows),
                                  num_tokens=float(sum(completion_lengths)))
            step_loss = 0.0
            for micro in self._micro_batches(rows):
                batch = self._batch(micro)
                logp = self.model.score(batch, temperature=self.config.training.temperature
                                        ).logprobs
                device = logp.device
                mask = batch.loss_mask.to(device)
                old = self._aligned(self.old, micro, batch).to(device)
                ref = self._aligned(self.reference, micro, batch).to(device)
                clip = ppo_clip_loss(logp, old, self.advantage[micro].to(device)[:, None],
                                     grpo.clip_ratio_low, grpo.clip_ratio_high, grpo.dual_clip)
                kl = kl_penalty(logp, ref, grpo.kl_estimator)
                loss = (reduce_over(clip.per_token, mask=mask)
                        + beta * reduce_over(kl, mask=mask))
                loss.backward()
                step_loss += loss.item()
                token_sums["train/kl"] += (kl.detach() * mask).sum().item()
                token_sums["clip_ratio"] += ((clip.clipped_low | clip.clipped_high).float()
                                             * mask).sum().item()
                token_count += mask.sum().item()
            learning_rate, norm = self._step()
            losses.append(step_loss)
            norms.append(norm)
            progress.update(1)
            progress.set_postfix(phase="grpo", loss=f"{step_loss:.3f}")
        metrics = {key: value / max(token_count, 1.0) for key, value in token_sums.items()}
        return metrics | {
            "loss": statistics.fmean(losses), "grad_norm": statistics.fmean(norms),
            "learning_rate": learning_rate, "kl_coef": beta,
            "candidates": float(sum(len(rows) for rows in selected)),
            "advantage_abs_mean": self.advantage[[row for rows in selected for row in rows]]
            .abs().mean().item(),
        }

    # ---- checkpoints -----------------------------------------------------------------
    def _consider_best(self, epoch: int, measured: dict[str, float]) -> None:
        margin = measured.get(MARGIN)
        if is_new_best(self.best, margin, measured["kl"], self.config.grpo.kl_band_high):
            self.best = {"epoch": epoch, MARGIN: margin, "kl": measured["kl"]}

    def _save_checkpoint(self, epoch: int) -> None:
        assert self.optimizer is not None and self.scheduler is not None
        folder = self.state_dir / f"checkpoint-{epoch:06d}"
        with atomic_directory(folder) as temp:
            self.model.save_adapter(temp / "lora_weights")
            torch.save({"optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict()}, temp / "optimizer_state.pt")
            save_rng_state(temp / "rng_state.pt")
            atomic_write_json(temp / "trainer_state.json", {
                "epoch": epoch, "phase": self.phase, "kl_coef": self.kl.beta,
                "best": self.best, "policy_version": self.model.policy_version})
        if self.best is not None and self.best["epoch"] == epoch:
            with atomic_directory(self.state_dir / "best") as best:
                self.model.save_adapter(best / "lora_weights")
                atomic_write_json(best / "best.json", self.best | {
                    "rule": f"largest {MARGIN} among epochs with kl <= "
                            f"{self.config.grpo.kl_band_high}"})

    def _restore(self, epoch: int) -> None:
        folder = self.state_dir / f"checkpoint-{epoch:06d}"
        self.model.load_adapter(folder / "lora_weights")
        trainer_state = json.loads((folder / "trainer_state.json").read_text())
        self.kl.beta = trainer_state["kl_coef"]
        self.best = trainer_state["best"]
        # Mid-phase, the optimiser goes on where it stopped; a new phase starts afresh.
        if epoch < self.total_epochs and self._phase_of(epoch + 1) == trainer_state["phase"]:
            self._enter_phase(trainer_state["phase"])
            assert self.optimizer is not None and self.scheduler is not None
            saved = torch.load(folder / "optimizer_state.pt", weights_only=False)
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
        load_rng_state(folder / "rng_state.pt")
        set_version = getattr(self.model, "set_policy_version", None)
        if set_version is not None:
            set_version(trainer_state["policy_version"])
