"""The commit protocol: the best rule chooses among committed steps by their figures, best/
is copied only after the commit point (once, and again after a kill before the copy), and a
resumed run goes on from the best so far."""

from __future__ import annotations

import json
from pathlib import Path

from src.configuration.assignment import TrackersConfig
from src.run.folder import RunDirectory, RunState
from src.run.metrics import MetricsLog
from src.run.protocol import BEST, BestRule, Part, RunProtocol, improves
from src.storage.checkpoint_store import CheckpointStore
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


def _protocol(folder: Path, rule: BestRule | None) -> tuple[RunProtocol, Weights, Path]:
    folder.mkdir(exist_ok=True)
    owner, store = Weights(), CheckpointStore(folder / "trainer")
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


def test_the_best_rule_never_takes_a_value_that_is_not_a_finite_number() -> None:
    # a NaN taken as the first best would stay best forever: nothing compares above it
    best = None
    for value in (float("nan"), 0.25, float("inf"), 0.5, float("nan"), 0.5, 0.4):
        if improves(value, best):
            best = value
    assert best == 0.5
    assert not improves(float("-inf"), None, mode="min")
    assert improves(0.1, 0.2, mode="min") and not improves(None, 0.2)
