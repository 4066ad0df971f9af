"""rollout.max_staleness 1: the next batch's episodes run in the rollout thread while the
current batch is committed, and they move the process's generators (the rollout seeds
torch's for its batch; an environment may seed or swap Python's). A checkpoint holds the
generators as they were at its batch's boundary, never a stream of the batch ahead."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from src.agents.instance.oracle_agent import OracleAgent
from src.configuration.assignment import AssignmentConfig
from src.online_training.loop import ExperimentLoop
from src.records.episode import Episode
from src.run.assembly import Components
from src.run.callbacks import BatchContext, EpisodeTrainer, TrainingSchedule
from src.run.folder import RunDirectory, RunState
from src.run.rollout import episode_seed
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.training.rng_state import save_rng_state
from src.training.safe_load import load_plain
from src.training.training_state import RNG

SEED = 3
BATCHES = 3


class SavesAfterTheBatchAheadStarted(EpisodeTrainer):
    """Trains nothing; saves the process's generators as a trainer's checkpoint does, once
    the batch rolling out ahead has started (so that its seeding has happened)."""

    def __init__(self) -> None:
        self.total = 0
        self.batch_index = -1
        self.started: dict[int, threading.Event] = {
            index: threading.Event() for index in range(BATCHES)}

    def prepare(self, schedule: TrainingSchedule) -> None:
        self.total = schedule.total_batches

    def on_session_created(self, episode: Episode) -> None:
        self.started[episode.batch_index].set()  # in the rollout thread for a batch ahead

    def train(self, batch: BatchContext) -> dict[str, float]:
        self.batch_index = batch.batch_index
        return {}

    def save_state(self, directory: Path) -> None:
        ahead = self.batch_index + 1
        if ahead < self.total:
            assert self.started[ahead].wait(timeout=60), "the batch ahead never started"
        save_rng_state(directory / RNG)

    def restore_state(self, directory: Path) -> None:
        pass


def test_each_checkpoint_holds_the_generators_of_its_batch_boundary(tmp_path: Path) -> None:
    assignment = AssignmentConfig.model_validate({
        "task": {"name": "math_problems"}, "agent": {"name": "oracle_agent"},
        "output_dir": str(tmp_path), "random_seed": SEED,
        "evaluation": {"at_start": False, "at_end": False},
        "rollout": {"batch_size": 2, "group_size": 2, "max_batches": BATCHES,
                    "max_staleness": 1}})
    components = Components(
        make_task=lambda: MathProblemsTask(num_train=8, num_validation=2, levels=[1]),
        agent=OracleAgent(), language_models={},
        callbacks={"trainer": SavesAfterTheBatchAheadStarted()})
    run = RunDirectory(tmp_path)
    ExperimentLoop(assignment, components, run, show_progress=False).execute(RunState())

    for step in range(1, BATCHES + 1):
        saved = load_plain(run.callback_store("trainer").path(step) / RNG)
        # batch `step - 1`'s rollout seeded torch's generator (the oracle draws nothing);
        # the batch ahead, seeded with its own, was rolling out while this was saved
        boundary = torch.Generator().manual_seed(episode_seed(SEED, step - 1, 0))
        assert torch.equal(saved["torch"], boundary.get_state()), step
