"""The supervised stage: token-level cross-entropy on the agent's tokens of demonstrations.

Reads top to bottom as the algorithm. Each demonstration is tokenised as the LoRA agent
would have fed and sampled it (src.language_models.chat_template.demonstration_ids), the
loss mask on the agent's replies and their end-of-turn tokens. Each epoch, a seeded
shuffle; windows of `length_bucket_batches` batches are sorted by length and cut into
mini-batches of `batch_size` (similar lengths, less padding), whose order is shuffled
again. One optimiser step per mini-batch through the training core's learner:
L = sum over the mini-batch's masked tokens of -log p / their count (token mean), AdamW,
warmup then cosine. A commit point every `save_every_steps` steps (and wherever an
evaluation falls): metrics, the checkpoint, the run state; `best/` by held-out success
(on the selection split where it is evaluated, so that the validation figure chose nothing).

Files under output_dir/training_state/: checkpoint-NNNNNN/ (NNNNNN: optimiser steps) and
best/, in the layout of every pipeline (src.run.protocol), the last 3 kept.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm import tqdm

from src.language_models.language_model import TrainableLanguageModel
from src.run.folder import TRAINING_STATE, RunDirectory, RunState
from src.run.metrics import MetricsLog
from src.run.protocol import BestRule, Part
from src.run.step_loop import StepReport, Steps, evaluate_apart, run_steps
from src.storage.checkpoint_store import CheckpointStore
from src.storage.state import Stateful
from src.supervised_training.config import SupervisedTrainingConfig
from src.training.learner import Learner, StepResult
from src.training.objectives import CrossEntropyObjective
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows


def length_bucketed_batches(lengths: Sequence[int], batch_size: int, window_batches: int,
                            seed: str) -> list[list[int]]:
    """Row indices in mini-batches: a seeded shuffle, windows of `window_batches` batches
    sorted by length and cut, then the mini-batches in a seeded order."""
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    window = batch_size * window_batches
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda row: lengths[row])
        batches += [chunk[first:first + batch_size] for first in range(0, len(chunk), batch_size)]
    random.Random(f"{seed}-order").shuffle(batches)
    return batches


class SupervisedTrainer(Steps, Stateful):
    unit = "step"

    def __init__(self, config: SupervisedTrainingConfig, language_model: TrainableLanguageModel,
                 rows: TokenRows, output_dir: Path,
                 evaluate: Callable[..., dict[str, float]] | None = None,
                 show_progress: bool = True) -> None:
        self.config = config
        self.model = language_model
        self.rows = rows
        self.store = CheckpointStore(output_dir / TRAINING_STATE)
        self.metrics = MetricsLog(output_dir)
        self.evaluator = evaluate
        self.show_progress = show_progress
        training = config.training
        lengths = rows.lengths
        self.schedule = [(epoch, batch) for epoch in range(1, training.epochs + 1)
                         for batch in length_bucketed_batches(
                             lengths, training.batch_size, training.length_bucket_batches,
                             f"{config.random_seed}-{epoch}")]
        self.steps_per_epoch = len(self.schedule) // training.epochs
        self.total = len(self.schedule)
        self.learner = Learner(language_model, training.optimizer)
        self.learner.schedule(self.total)  # warmup_ratio and lr_schedule as configured
        self.objective = CrossEntropyObjective("token-mean")
        self.step_taken = 0  # the last optimiser step taken
        # the optimiser steps since the last commit point, and the time their tokens took
        self.window: list[StepResult] = []
        self.window_metrics = TokenMetrics()
        self.window_started, self.window_tokens = 0.0, 0

    def train(self, run: RunDirectory, state: RunState) -> dict:
        """Train the steps after the last committed one (`state.completed_batches` counts
        optimiser steps here), committing as configured; return the run's summary."""
        return run_steps(self, run, state, self.show_progress)

    # ---- the steps, as the step loop runs them -------------------------------------
    def parts(self) -> list[Part]:
        evaluation = self.config.evaluation
        rule = BestRule(evaluation.best_metric) if evaluation is not None else None
        return [Part(self.store, self, rule)]

    def at_start(self) -> dict[str, float]:
        figures = {"demonstrations": float(len(self.rows)),
                   "demonstration_tokens": float(self.rows.batch.loss_mask.sum())}
        evaluation = self.config.evaluation
        if evaluation is not None and evaluation.at_start and self.evaluator is not None:
            figures |= self.evaluate(0)
        return figures

    def step(self, step: int, progress: tqdm) -> StepReport:
        """One optimiser step; at a commit point, the means of the steps since the last."""
        if not self.window:
            self.window_started = time.perf_counter()
        _, batch = self.schedule[step - 1]
        self.window.append(self.learner.update(self.rows, batch, self.objective,
                                               self.window_metrics))
        self.model.mark_updated()
        self.window_tokens += int(self.rows.batch.loss_mask[batch].sum())
        progress.update(1)
        progress.set_postfix(loss=f"{self.window[-1].loss:.3f}")
        if not self._commit_point(step):
            return StepReport({}, commit=False)
        window = self.window
        figures = {"loss": statistics.fmean(result.loss for result in window),
                   "grad_norm": statistics.fmean(result.grad_norm for result in window),
                   "learning_rate": window[-1].learning_rate,
                   "epoch": step / self.steps_per_epoch,
                   "agent_tokens_per_s": self.window_tokens / (time.perf_counter()
                                                               - self.window_started)}
        figures |= {f"train/{key}": value for key, value in self.window_metrics.means().items()}
        self.step_taken = step
        self.window, self.window_metrics, self.window_tokens = [], TokenMetrics(), 0
        return StepReport(figures, postfix={"loss": f"{window[-1].loss:.3f}"})

    def evaluation_due(self, step: int) -> bool:
        return self.evaluator is not None and self._evaluation_step(step)

    def evaluate(self, step: int) -> dict[str, float]:
        assert self.evaluator is not None  # evaluation_due says so
        return evaluate_apart(self.evaluator, step, self.metrics)

    def _evaluation_step(self, step: int) -> bool:
        """The last step, and every `evaluation.every_steps`-th."""
        every = self.config.evaluation.every_steps if self.config.evaluation else None
        return step == self.total or (every is not None and step % every == 0)

    def _commit_point(self, step: int) -> bool:
        """Every `save_every_steps`-th step, and wherever an evaluation falls."""
        return (step % self.config.training.save_every_steps == 0
                or self._evaluation_step(step))

    # ---- state, as the run protocol saves and restores it -----------------------------
    def save_state(self, directory: Path) -> None:
        self.learner.save(directory, {"step": self.step_taken})

    def restore_state(self, directory: Path) -> None:
        self.step_taken = self.learner.restore(directory)["step"]
