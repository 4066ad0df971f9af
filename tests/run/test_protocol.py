"""The commit protocol: the best rule chooses among committed steps by their figures, best/
is copied only after the commit point (once, and again after a kill before the copy), a
resumed run goes on from the best so far, and a resume that goes back before the best step
(a damaged latest checkpoint removed) takes best/ back to the history it keeps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from src.configuration.models import TrackersConfig
from src.run.folder import TRAINING_STATE, RunDirectory, RunState
from src.run.metrics import MetricsLog
from src.run.protocol import BEST, BestRule, Part, RunProtocol, improves
from src.storage.checkpoint_store import CheckpointStore
from src.storage.files import DamagedRunFolder
from src.storage.state import Stateful


class Weights(Stateful):
    """A part whose checkpoint is an adapter folder holding the step it was saved at."""

    def __init__(self) -> None:
        self.step = 0

    def save_state(self, directory: Path) -> None:
        (directory / "lora_weights").mkdir()
        (directory / "lora_weights" / "weights.txt").write_text(f"step {self.step}")

    def restore_state(self, directory: Path) -> None:
        text = (directory / "lora_weights" / "weights.txt").read_text()
        self.step = int(text.removeprefix("step "))


def _protocol(folder: Path, rule: BestRule | None, store_name: str = "trainer"
              ) -> tuple[RunProtocol, Weights, Path]:
    folder.mkdir(exist_ok=True)
    owner, store = Weights(), CheckpointStore(folder / store_name)
    metrics = MetricsLog(folder, TrackersConfig(tensorboard=False))
    return RunProtocol(RunDirectory(folder), metrics, [Part(store, owner, rule)]), owner, store.root


def _commit(protocol: RunProtocol, owner: Weights, step: int, figures: dict) -> None:
    owner.step = step
    protocol.metrics.log(step, figures)
    protocol.commit(step, figures)


def test_the_best_step_by_the_rule_is_copied_after_its_commit(tmp_path: Path) -> None:
    protocol, owner, root = _protocol(tmp_path / "run", BestRule("selection/success"))
    # step 2 evaluates nothing; 3 ties 4 (the earlier stays best); 5 is a NaN
    figures = {1: {"selection/success": 0.25}, 2: {"loss": 1.0},
               3: {"selection/success": 0.5}, 4: {"selection/success": 0.5},
               5: {"selection/success": float("nan")}}
    for step, values in figures.items():
        _commit(protocol, owner, step, values)
        marked = (root / f"checkpoint-{step:06d}" / "best.json").is_file()
        assert marked == (step in (1, 3))
    record = json.loads((root / BEST / "best.json").read_text())
    assert record == {"step": 3, "metric": "selection/success", "value": 0.5}
    assert (root / BEST / "lora_weights" / "weights.txt").read_text() == "step 3"
    assert protocol.best() == record


def test_a_bound_figure_keeps_steps_out_and_the_record_says_so(tmp_path: Path) -> None:
    rule = BestRule("margin", bound=("kl", 0.1), step_key="epoch")
    protocol, owner, root = _protocol(tmp_path / "run", rule)
    _commit(protocol, owner, 1, {"margin": 0.3, "kl": 0.05})
    _commit(protocol, owner, 2, {"margin": 0.9, "kl": 0.2})  # larger, but too far off
    assert json.loads((root / BEST / "best.json").read_text()) == {
        "epoch": 1, "metric": "margin", "value": 0.3, "kl": 0.05,
        "rule": "largest margin among epochs with kl <= 0.1"}


def test_a_resumed_run_finishes_the_copy_and_keeps_the_best_so_far(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    protocol, owner, root = _protocol(folder, BestRule("reward"))
    _commit(protocol, owner, 1, {"reward": 0.5})
    # a kill after step 2's commit point, before its copy to best/
    owner.step = 2
    with protocol.parts[0].store.write(2) as checkpoint:
        owner.save_state(checkpoint)
        (checkpoint / "best.json").write_text(
            json.dumps({"step": 2, "metric": "reward", "value": 0.7}))
    RunDirectory(folder).write_state(RunState(completed_batches=2,
                                              metrics_bytes=protocol.metrics.jsonl.size))
    resumed, owner, _ = _protocol(folder, BestRule("reward"))
    assert resumed.restore(RunDirectory(folder).read_state()) == 2
    assert owner.step == 2
    assert (root / BEST / "lora_weights" / "weights.txt").read_text() == "step 2"
    _commit(resumed, owner, 3, {"reward": 0.6})  # below the 0.7 the resumed run kept
    assert json.loads((root / BEST / "best.json").read_text())["step"] == 2


def test_a_best_record_of_an_earlier_run_keeps_its_value_by_metric(tmp_path: Path) -> None:
    """best.json of offline runs before the record named its value: {epoch, <metric>, kl}."""
    folder = tmp_path / "run"
    protocol, owner, root = _protocol(folder, BestRule("margin", step_key="epoch"))
    _commit(protocol, owner, 1, {"margin": 0.3})
    earlier = json.dumps({"epoch": 1, "margin": 0.8, "kl": 0.0})
    for mark in (root / "checkpoint-000001" / "best.json", root / BEST / "best.json"):
        mark.write_text(earlier)
    resumed, owner, _ = _protocol(folder, BestRule("margin", step_key="epoch"))
    resumed.restore(RunDirectory(folder).read_state())
    _commit(resumed, owner, 2, {"margin": 0.5})
    assert json.loads((root / BEST / "best.json").read_text())["epoch"] == 1


@pytest.mark.parametrize(("rewards", "best_after"), [
    ([0.1, 0.3, 0.2, 0.5], 2),  # step 2, marked best, is kept: best/ goes back to it
    ([0.3, 0.1, 0.2, 0.5], None),  # step 1, the best before step 4, is pruned: none
])
def test_removing_the_latest_checkpoint_takes_best_back_to_the_history_kept(
        tmp_path: Path, rewards: list[float], best_after: int | None) -> None:
    folder = tmp_path / "run"
    protocol, owner, root = _protocol(folder, BestRule("reward"), TRAINING_STATE)
    RunDirectory(folder).write_state(RunState())
    for step, reward in enumerate(rewards, start=1):
        _commit(protocol, owner, step, {"reward": reward})
    assert json.loads((root / BEST / "best.json").read_text())["step"] == 4
    # what the damaged-checkpoint message advises: remove it, resume from the one before
    shutil.rmtree(root / "checkpoint-000004")
    run = RunDirectory(folder)
    state = run.check_checkpoints(run.read_state())
    assert state.completed_batches == 3

    resumed, owner, _ = _protocol(folder, BestRule("reward"), TRAINING_STATE)
    assert resumed.restore(state) == 3 and owner.step == 3
    if best_after is None:
        assert resumed.best() is None and not (root / BEST).exists()
    else:
        record = {"step": best_after, "metric": "reward", "value": rewards[best_after - 1]}
        assert resumed.best() == record
        assert json.loads((root / BEST / "best.json").read_text()) == record
        assert (root / BEST / "lora_weights" / "weights.txt").read_text() == f"step {best_after}"
    # the redone step 4 is judged against the best of the history kept
    _commit(resumed, owner, 4, {"reward": 0.25})
    assert (json.loads((root / BEST / "best.json").read_text())["step"]
            == (2 if best_after == 2 else 4))


@pytest.mark.parametrize(("step", "problem"), [
    (99, "names step 99, which this run never reached"),
    ("two", "names no committed step"),
])
def test_a_best_record_naming_no_step_of_the_run_is_refused(tmp_path: Path, step: object,
                                                            problem: str) -> None:
    folder = tmp_path / "run"
    protocol, owner, root = _protocol(folder, BestRule("reward"))
    for committed in (1, 2):
        _commit(protocol, owner, committed, {"reward": 0.1 * committed})
    (root / BEST / "best.json").write_text(json.dumps({"step": step, "metric": "reward",
                                                       "value": 0.9}))
    resumed, _, _ = _protocol(folder, BestRule("reward"))
    with pytest.raises(DamagedRunFolder, match=problem):
        resumed.restore(RunDirectory(folder).read_state())


def test_the_best_rule_never_takes_a_value_that_is_not_a_finite_number() -> None:
    # a NaN taken as the first best would stay best forever: nothing compares above it
    best = None
    for value in (float("nan"), 0.25, float("inf"), 0.5, float("nan"), 0.5, 0.4):
        if improves(value, best):
            best = value
    assert best == 0.5
    assert not improves(float("-inf"), None, mode="min")
    assert improves(0.1, 0.2, mode="min") and not improves(None, 0.2)
