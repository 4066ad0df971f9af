"""The checkpoint store every pipeline uses: pruning and best/ promotion after commit."""

from __future__ import annotations

import json
from pathlib import Path

from src.training.checkpoints import CheckpointStore, improves, mark_best


def _checkpoint(store: CheckpointStore, step: int, best: bool = False) -> None:
    with store.write(step) as folder:
        (folder / "lora_weights").mkdir()
        (folder / "lora_weights" / "adapter_model.safetensors").write_text(f"weights {step}")
        if best:
            mark_best(folder, {"metric": "reward", "step": step})


def test_prune_keeps_the_newest_committed_and_drops_uncommitted(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state")
    for step in (1, 2, 3, 4, 5, 7):
        _checkpoint(store, step)
    stale = tmp_path / "state" / ".checkpoint-000006.abc.tmp"
    stale.mkdir()
    store.prune(keep=3, committed=5)
    assert store.steps() == [3, 4, 5]
    assert not stale.exists()


def test_best_is_promoted_only_when_asked_and_only_once(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state")
    _checkpoint(store, 1, best=True)
    _checkpoint(store, 2)
    assert not (tmp_path / "state" / "best").exists()  # nothing before the commit
    assert store.promote_best(1)
    assert not store.promote_best(1)  # again after a resume: nothing to do
    assert not store.promote_best(2)  # not marked
    best = tmp_path / "state" / "best"
    assert json.loads((best / "best.json").read_text()) == {"metric": "reward", "step": 1}
    assert (best / "lora_weights" / "adapter_model.safetensors").read_text() == "weights 1"


def test_the_best_rule_never_takes_a_value_that_is_not_a_finite_number() -> None:
    # a NaN taken as the first best would stay best forever: nothing compares above it
    best = None
    for value in (float("nan"), 0.25, float("inf"), 0.5, float("nan"), 0.5, 0.4):
        if improves(value, best):
            best = value
    assert best == 0.5
    assert not improves(float("-inf"), None, mode="min")
    assert improves(0.1, 0.2, mode="min") and not improves(None, 0.2)
