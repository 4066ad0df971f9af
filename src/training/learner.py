"""The one update path: token rows -> micro-batches -> objective -> backward -> one
optimiser step per mini-batch. Every pipeline (online RL, offline groups, supervised)
trains through it, and saves and restores its state through src.training.training_state.

In data-parallel training (src.training.sharded_learner) each worker runs this same
update on its `Shard` of the micro-batches."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from src.configuration.components import import_dotted
from src.language_models.language_model import ScoredTokens, TrainableLanguageModel
from src.storage.files import DamagedRunFolder
from src.training.micro_batches import (
    automatic_token_budget,
    split_by_token_budget,
    split_packs_by_token_budget,
)
from src.training.objectives import MiniBatchTotals
from src.training.optimisation import (
    LearningRateSchedule,
    clipped_optimizer_step,
    learning_rate_factor,
    zero_gradients,
)
from src.training.settings import OptimizerSettings
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows
from src.training.training_state import (
    OPTIMIZER,
    load_training_state,
    non_finite_weights,
    save_training_state,
)


class Objective(Protocol):
    with_entropy: bool
    dropout: bool  # LoRA dropout on while scoring for the loss

    def __call__(self, part: TokenRows, scored: ScoredTokens, totals: MiniBatchTotals,
                 metrics: TokenMetrics) -> torch.Tensor: ...

    def vanishes(self, rows: TokenRows, indices: Sequence[int]) -> bool:
        """Whether the loss of these rows is 0 with a zero gradient whatever the model
        scores."""
        ...


class NonFiniteUpdate(RuntimeError):
    """An optimiser step left NaN or infinite values in the trainable weights."""


@dataclass(frozen=True)
class StepResult:
    loss: float  # a step without a forward (`Learner.skips_forward`): the exact 0
    grad_norm: float
    learning_rate: float  # the rate this step used
    scored: bool = True  # False: taken on zero gradients without a forward


@dataclass(frozen=True)
class Shard:
    """Worker `rank` of `world` takes every world-th micro-batch of a mini-batch."""

    rank: int = 0
    world: int = 1

    def passes(self, micro_batches: list[list[int]]) -> list[tuple[list[int], bool]]:
        """This worker's (micro-batch, counts) passes. Every worker makes the same number
        of passes, because each pass's collectives (sharded weights gathered, gradients
        reduced) need all of them: a worker short of micro-batches repeats the first one
        with its loss counted zero times."""
        own = micro_batches[self.rank::self.world]
        passes = math.ceil(len(micro_batches) / self.world)
        return ([(micro, True) for micro in own]
                + [(micro_batches[0], False)] * (passes - len(own)))


@torch.no_grad()
def load_trainable(model: TrainableLanguageModel, values: Sequence[torch.Tensor]) -> None:
    """Copy `values` into the model's trainable parameters, in their order."""
    for parameter, value in zip(model.trainable_parameters(), values, strict=True):
        parameter.copy_(value)


AUTO_BUDGET_KEY = "auto_micro_batch_max_tokens"  # a checkpoint's resolved `auto` budget


def budget_record(settings: OptimizerSettings,
                  token_budget: Callable[[], int | None]) -> dict[str, int | None]:
    """The checkpoint entry of a learner whose budget is `auto`: the tokens it resolved."""
    if settings.micro_batch_max_tokens != "auto":
        return {}
    return {AUTO_BUDGET_KEY: token_budget()}


class Learner:
    def __init__(self, model: TrainableLanguageModel, settings: OptimizerSettings,
                 shard: Shard | None = None) -> None:
        self.model = model
        self.settings = settings
        self.shard = shard or Shard()
        optimizer_type = (getattr(torch.optim, settings.optimizer_class, None)
                          or import_dotted(settings.optimizer_class))
        self.optimizer: torch.optim.Optimizer = optimizer_type(
            model.trainable_parameters(), lr=settings.learning_rate,
            weight_decay=settings.weight_decay)
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.step = 0  # optimiser steps taken
        self._token_budget = settings.micro_batch_max_tokens  # `auto` until first needed

    def schedule(self, total_steps: int, warmup_ratio: float | None = None,
                 kind: LearningRateSchedule | None = None) -> None:
        """Linear warmup then constant or cosine over `total_steps` optimiser steps."""
        total_steps = max(1, total_steps)
        ratio = self.settings.warmup_ratio if warmup_ratio is None else warmup_ratio
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, learning_rate_factor(
            int(ratio * total_steps), total_steps, kind or self.settings.lr_schedule))

    # ---- micro-batches -------------------------------------------------------------
    def micro_batches(self, rows: TokenRows, indices: Sequence[int],
                      model: TrainableLanguageModel | None = None) -> list[list[int]]:
        """`gradient_accumulation_steps` equal parts, each cut further so that its padded
        size (rows x longest row, or for a model that packs shared prefixes, packs x
        longest pack) stays within `micro_batch_max_tokens`. `model`: the one that scores
        them, where not the learner's (a distillation teacher)."""
        count = max(1, min(self.settings.gradient_accumulation_steps, len(indices)))
        size = math.ceil(len(indices) / count)
        parts = [list(indices[start:start + size]) for start in range(0, len(indices), size)]
        budget = self.token_budget()
        if (model or self.model).packs_shared_prefixes:
            sequences = rows.sequences()
            return [micro for part in parts
                    for micro in split_packs_by_token_budget(part, sequences, budget)]
        lengths = rows.lengths
        return [micro for part in parts
                for micro in split_by_token_budget(part, lengths, budget)]

    def token_budget(self) -> int | None:
        """The micro-batch budget in padded tokens (None: unbounded). `auto` is resolved
        once, when first needed, and kept: the splits, and with them the rounding of every
        step, must not move with the memory free at each step; a checkpoint carries it to
        the resumed run (`save`, `restore`)."""
        if self._token_budget == "auto":
            self._token_budget = automatic_token_budget(self.model)
        return self._token_budget

    def fix_token_budget(self, tokens: int | None) -> None:
        """Use `tokens` where the setting is `auto` (a checkpoint's, or the one trainer
        workers agreed on)."""
        if self.settings.micro_batch_max_tokens == "auto":
            self._token_budget = tokens

    # ---- scoring without gradients -------------------------------------------------
    @torch.no_grad()
    def score(self, rows: TokenRows, *, temperature: float = 1.0, with_adapter: bool = True,
              adapter: Sequence[torch.Tensor] | None = None,
              model: TrainableLanguageModel | None = None) -> torch.Tensor:
        """Per-token log-probs [rows, length] on the CPU (0 where the loss mask is 0, and
        on the rows of micro-batches another shard scores). `adapter`: score with these
        values of the trainable parameters in place of the current ones (the KL
        reference's starting adapter); the current ones are back afterwards. `model`:
        another model scores the rows (a distillation teacher), in the same micro-batches
        as the learner's own scoring."""
        if adapter is not None and model is not None:
            raise ValueError("an adapter swaps the learner's own weights: not with another model")
        scorer = model or self.model
        rows.check_within(scorer.max_context_tokens)
        scorer.eval_mode()
        scores = torch.zeros_like(rows.batch.loss_mask)
        current = self._swap_trainable(adapter) if adapter is not None else None
        try:
            for micro, counts in self.shard.passes(
                    self.micro_batches(rows, range(len(rows)), scorer)):
                part = rows.select(micro)
                logprobs = scorer.score(part.batch, temperature=temperature,
                                        with_adapter=with_adapter).logprobs
                if counts:
                    scores[micro, : logprobs.shape[1]] = logprobs.to(scores.device)
        finally:
            if current is not None:
                self._swap_trainable(current)
        return scores

    def _swap_trainable(self, values: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Put `values` into the trainable parameters; return what they held."""
        previous = [parameter.detach().clone()
                    for parameter in self.model.trainable_parameters()]
        load_trainable(self.model, values)
        return previous

    # ---- one optimiser step --------------------------------------------------------
    def update(self, rows: TokenRows, indices: Sequence[int], objective: Objective,
               metrics: TokenMetrics, temperature: float = 1.0) -> StepResult:
        """Accumulate the objective's gradient over the mini-batch `indices` in
        micro-batches, then take one clipped optimiser step.

        A mini-batch whose gradient is known to be exactly zero takes the step without a
        forward or backward pass (`skips_forward`): on zero gradients, so that the
        weights, the optimiser's state and the schedule move exactly as the scored step
        would move them (AdamW still decays the weights, applies the momentum of earlier
        steps and counts the step)."""
        rows.check_within(self.model.max_context_tokens)
        self.model.train_mode(dropout=objective.dropout)
        scored = not self.skips_forward(rows, indices, objective)
        if scored:
            step_loss = self._accumulate_gradients(rows, indices, objective, metrics,
                                                   temperature)
        else:
            zero_gradients(self.model.trainable_parameters())
            step_loss = 0.0
        learning_rate = self.learning_rate
        norm = clipped_optimizer_step(self.optimizer, self.scheduler,
                                      self.model.trainable_parameters(),
                                      self.settings.max_grad_norm)
        self.step += 1
        self.model.eval_mode()
        damaged = non_finite_weights(self.model)
        if damaged:  # every later sample and step would be NaN: stop before committing it
            raise NonFiniteUpdate(
                f"optimiser step {self.step} (loss {step_loss}, gradient norm {norm}) left "
                f"values that are not finite numbers in {damaged} of the adapter's tensors; "
                "the run stops here, before committing them, and its last committed "
                "checkpoint is as it was. A loss or gradient that overflows (a learning rate "
                "too high, no optimizer.max_grad_norm) does this")
        return StepResult(step_loss, norm, learning_rate, scored)

    @staticmethod
    def skips_forward(rows: TokenRows, indices: Sequence[int], objective: Objective) -> bool:
        """Whether the step on `indices` goes without a forward and backward: only when
        skipping them changes no bit of the run. That needs both
        - the objective's gradient exactly zero whatever the model scores
          (`objective.vanishes`: for RL, every advantage 0 and no other term). A real
          backward of it leaves zeros on every trainable parameter (0 x a finite value,
          and the scores are finite: a step that leaves weights not finite stops the run);
        - a forward that draws no random numbers: with dropout on, the forward draws from
          torch's generator, and skipping it would move every later draw (sampling
          included). With dropout off (the RL objectives' default) it draws none; an
          objective that keeps dropout on is always scored, even where the model's
          dropout rate is 0."""
        return not objective.dropout and objective.vanishes(rows, indices)

    def _accumulate_gradients(self, rows: TokenRows, indices: Sequence[int],
                              objective: Objective, metrics: TokenMetrics,
                              temperature: float) -> float:
        """Forward and backward over the micro-batches of `indices`; the mini-batch's loss."""
        mini_mask = rows.batch.loss_mask[list(indices)]
        totals = MiniBatchTotals(num_sequences=len(indices), num_tokens=float(mini_mask.sum()),
                                 longest_completion=int(mini_mask.sum(-1).max().item()))
        step_loss = 0.0
        with torch.enable_grad():
            for micro, counts in self.shard.passes(self.micro_batches(rows, indices)):
                part = rows.select(micro)
                scored = self.model.score(part.batch, temperature=temperature,
                                          with_entropy=objective.with_entropy)
                loss = objective(part, scored, totals, metrics if counts else TokenMetrics())
                if not counts:
                    loss = loss * 0.0
                loss.backward()
                step_loss += loss.item()
        return step_loss

    @property
    def learning_rate(self) -> float:
        """The rate the next step takes."""
        return self.optimizer.param_groups[0]["lr"]

    # ---- state ---------------------------------------------------------------------
    def save(self, directory: Path, extra: dict[str, Any]) -> None:
        save_training_state(directory, self.model, self.optimizer.state_dict(),
                            self.scheduler.state_dict() if self.scheduler else None,
                            {"optimizer_step": self.step,
                             **budget_record(self.settings, self.token_budget), **extra})

    def restore(self, directory: Path, restore_optimizer: bool = True) -> dict[str, Any]:
        saved = load_training_state(directory, self.model)
        if restore_optimizer:
            try:
                self.load_optimizer_state(saved.optimizer_state, saved.scheduler_state)
            except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as error:
                raise DamagedRunFolder(f"{directory / OPTIMIZER}: not the state of this "
                                       f"trainer's optimiser ({type(error).__name__}: "
                                       f"{error})") from error
        self.step = saved.extra["optimizer_step"]
        if AUTO_BUDGET_KEY in saved.extra:
            self.fix_token_budget(saved.extra[AUTO_BUDGET_KEY])
        return saved.extra

    def load_optimizer_state(self, optimizer_state: dict[str, Any] | None,
                             scheduler_state: dict[str, Any] | None) -> None:
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        if self.scheduler is not None and scheduler_state is not None:
            self.scheduler.load_state_dict(scheduler_state)
