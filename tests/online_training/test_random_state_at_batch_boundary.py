"""rollout.max_staleness 1: the next batch's episodes run in the rollout thread while the
current batch is committed, and they move the process's generators (the rollout seeds
torch's for its batch; an environment may seed or swap Python's). A checkpoint holds the
generators as they were at its batch's boundary, never a stream of the batch ahead."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from src.agents.instance.oracle_agent import OracleAgent
from src.online_training.config import OnlineTrainingConfig
from src.online_training.loop import OnlineTraining
from src.online_training.plan import Components
from src.records.episode import Episode
from src.run.folder import RunDirectory, RunState
from src.run.rollout import episode_seed
from src.run.step_loop import run_steps
from src.run.trainer import BatchContext, Trainer, TrainingSchedule
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.splits import Splits
from src.training.rng_state import save_rng_state
from src.training.safe_load import load_plain
from src.training.training_state import RNG

SEED = 3
BATCHES = 3


class SignalsEpisodeStarts(OracleAgent):
    """The oracle, which says when each batch's first episode started."""

    def __init__(self, started: dict[int, threading.Event]) -> None:
        super().__init__()
        self.started = started

    def start_episode(self, episode: Episode) -> None:
        super().start_episode(episode)
        self.started[episode.batch_index].set()  # in the rollout thread for a batch ahead


class SavesAfterTheBatchAheadStarted(Trainer):
    """Trains nothing; saves the process's generators as a trainer's checkpoint does, once
    the batch rolling out ahead has started (so that its seeding has happened)."""

    def __init__(self) -> None:
        self.total = 0
        self.batch_index = -1
        self.started: dict[int, threading.Event] = {
            index: threading.Event() for index in range(BATCHES)}

    def prepare(self, schedule: TrainingSchedule) -> None:
        self.total = schedule.total_batches

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
    assignment = OnlineTrainingConfig.model_validate({
        "task": {"name": "math_problems"}, "agent": {"name": "oracle_agent"},
        "output_dir": str(tmp_path), "random_seed": SEED,
        "evaluation": {"at_start": False, "at_end": False},
        "rollout": {"batch_size": 2, "group_size": 2, "max_batches": BATCHES,
                    "max_staleness": 1}})
    trainer = SavesAfterTheBatchAheadStarted()
    components = Components(
        make_task=lambda: MathProblemsTask(splits=Splits(num_train=8, num_validation=2),
                                           levels=[1]),
        agent=SignalsEpisodeStarts(trainer.started), language_models={},
        trainers={"trainer": trainer})
    run = RunDirectory(tmp_path)
    steps = OnlineTraining(assignment, components, run)
    run_steps(steps, run, RunState(), show_progress=False)

    for step in range(1, BATCHES + 1):
        saved = load_plain(run.callback_store("trainer").path(step) / RNG)
        # batch `step - 1`'s rollout seeded torch's generator (the oracle draws nothing);
        # the batch ahead, seeded with its own, was rolling out while this was saved
        boundary = torch.Generator().manual_seed(episode_seed(SEED, step - 1, 0))
        assert torch.equal(saved["torch"], boundary.get_state()), step
