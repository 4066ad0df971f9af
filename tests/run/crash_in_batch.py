"""A run that dies in the middle of a batch, after rolling it out and before its commit:
what a kill at that moment leaves behind, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.online_training.loop import OnlineTraining
from src.online_training.plan import build_components, load_online_config, plan_online_training
from src.run.folder import RunDirectory
from src.run.step_loop import run_steps
from src.run.trainer import BatchContext, Trainer, TrainingSchedule


class CrashInBatch(Trainer):
    """Dies in the update of batch `batch_index`, or with `after_evaluation` once that
    batch's evaluation has been logged, as its commit saves the trainers' checkpoints
    (still before its commit point)."""

    def __init__(self, batch_index: int, after_evaluation: bool = False) -> None:
        self.batch_index = batch_index
        self.after_evaluation = after_evaluation

    def prepare(self, schedule: TrainingSchedule) -> None:
        pass

    def train(self, batch: BatchContext) -> dict[str, float]:
        if batch.batch_index == self.batch_index and not self.after_evaluation:
            raise KeyboardInterrupt("killed")
        return {}

    def save_state(self, directory: Path) -> None:
        if self.after_evaluation and f"checkpoint-{self.batch_index + 1:06d}" in directory.name:
            raise KeyboardInterrupt("killed")


def run_until_crash(config: Path, batch_index: int,
                    after_evaluation: bool = False) -> RunDirectory:
    """Run `config` until it dies in batch `batch_index` (batches before it committed)."""
    experiment, source = load_online_config(config)
    run = RunDirectory(Path(experiment.assignment_config.output_dir))
    state = run.start(experiment, config)
    components = build_components(plan_online_training(experiment, source))
    components.trainers["crash"] = CrashInBatch(batch_index, after_evaluation)
    with pytest.raises(KeyboardInterrupt):
        steps = OnlineTraining(experiment.assignment_config, components, run)
        run_steps(steps, run, state, show_progress=False)
    return run
