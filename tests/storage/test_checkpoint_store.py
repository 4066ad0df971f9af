"""The checkpoint store every stateful part uses: pruning, and the check that tells a
damaged checkpoint before anything loads from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from src.storage.checkpoint_store import CheckpointStore, check_checkpoint
from src.storage.files import DamagedRunFolder


def test_prune_keeps_the_newest_committed_and_drops_uncommitted(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state")
    for step in (1, 2, 3, 4, 5, 7):
        with store.write(step) as folder:
            (folder / "state.json").write_text(f"{{\"step\": {step}}}")
    stale = tmp_path / "state" / ".checkpoint-000006.abc.tmp"
    stale.mkdir()
    store.prune(keep=3, committed=5)
    assert store.steps() == [3, 4, 5]
    assert not stale.exists()


def _whole_checkpoint(folder: Path) -> dict[str, bytes]:
    """A checkpoint's kinds of file, as the run writes them; their bytes by path."""
    (folder / "lora_weights").mkdir(parents=True)
    save_file({"lora_A": torch.randn(4, 8), "lora_B": torch.zeros(8, 4)},
              folder / "lora_weights" / "adapter_model.safetensors")
    (folder / "lora_weights" / "adapter_config.json").write_text('{"r": 4, "lora_alpha": 8}')
    (folder / "lora_weights" / "README.md").write_text("")  # not read back: not checked
    torch.save({"optimizer": {"state": {0: {"exp_avg": torch.randn(32)}}}},
               folder / "optimizer_state.pt")
    (folder / "training_step.json").write_text('{"policy_version": 3}')
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in folder.rglob("*") if path.is_file()}


@pytest.mark.parametrize(("file", "problem"), [
    ("lora_weights/adapter_config.json", "not JSON"),
    ("lora_weights/adapter_model.safetensors", "not a whole safetensors file"),
    ("optimizer_state.pt", "not a whole torch file"),
    ("training_step.json", "not JSON"),
])
def test_a_file_cut_anywhere_or_emptied_is_named(tmp_path: Path, file: str,
                                                 problem: str) -> None:
    folder = tmp_path / "checkpoint-000001"
    whole = _whole_checkpoint(folder)
    check_checkpoint(folder)
    data = whole[file]
    for length in sorted({0, 1, 9, len(data) // 3, len(data) // 2, len(data) - 1}):
        (folder / file).write_bytes(data[:length])
        with pytest.raises(DamagedRunFolder) as raised:
            check_checkpoint(folder)
        assert str(raised.value).startswith(f"{folder / file}: ")
        assert ("empty (0 bytes)" if length == 0 else problem) in str(raised.value)
    (folder / file).write_bytes(data)
    check_checkpoint(folder)


def test_a_missing_checkpoint_is_named(tmp_path: Path) -> None:
    with pytest.raises(DamagedRunFolder, match="checkpoint-000002: missing"):
        check_checkpoint(tmp_path / "checkpoint-000002")
