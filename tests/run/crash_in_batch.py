"""A run that dies in the middle of a batch, after rolling it out and before its commit:
what a kill at that moment leaves behind, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.online_training.loop import ExperimentLoop
from src.run.assembly import build_components, load_experiment_config, plan_experiment
from src.run.callbacks import BatchContext, Callback
from src.run.folder import RunDirectory


class CrashInBatch(Callback):
    """Dies in the update of batch `batch_index`, or with `after_evaluation` once that
    batch's evaluation has been logged (still before its commit)."""

    def __init__(self, batch_index: int, after_evaluation: bool = False) -> None:
        self.batch_index = batch_index
        self.after_evaluation = after_evaluation

    def on_batch_end(self, batch: BatchContext) -> dict[str, float]:
        if batch.batch_index == self.batch_index and not self.after_evaluation:
            raise KeyboardInterrupt("killed")
        return {}

    def on_evaluation(self, step: int, metrics: dict[str, float]) -> None:
        if self.after_evaluation and step == self.batch_index + 1:
            raise KeyboardInterrupt("killed")


def run_until_crash(config: Path, batch_index: int,
                    after_evaluation: bool = False) -> RunDirectory:
    """Run `config` until it dies in batch `batch_index` (batches before it committed)."""
    experiment, source = load_experiment_config(config)
    run = RunDirectory(Path(experiment.assignment_config.output_dir))
    state = run.start(experiment, config)
    components = build_components(plan_experiment(experiment, source))
    components.callbacks["crash"] = CrashInBatch(batch_index, after_evaluation)
    with pytest.raises(KeyboardInterrupt):
        ExperimentLoop(experiment.assignment_config, components, run,
                       show_progress=False).execute(state)
    return run
