"""The checkpoint store every stateful part uses: pruning, the checksums each checkpoint
holds, and the check that tells a damaged checkpoint (or a link out of the run folder)
before anything loads from it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from src.storage.checkpoint_store import CHECKSUMS, CheckpointStore, check_checkpoint
from src.storage.files import DamagedRunFolder


def test_prune_keeps_the_newest_committed_and_drops_uncommitted(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state")
    for step in (1, 2, 3, 4, 5, 7):
        with store.write(step) as folder:
            (folder / "state.json").write_text(f"{{\"step\": {step}}}")
    stale = tmp_path / "state" / ".checkpoint-000006.abc_1234.tmp"  # as atomic_directory names it
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


def _written(store: CheckpointStore, step: int) -> Path:
    with store.write(step) as folder:
        _whole_checkpoint(folder)
    return store.path(step)


def test_a_checkpoint_holds_the_sha256_of_each_of_its_files(tmp_path: Path) -> None:
    folder = _written(CheckpointStore(tmp_path / "state"), 1)
    recorded = json.loads((folder / CHECKSUMS).read_text())["sha256"]
    files = sorted(path for path in folder.rglob("*") if path.is_file()
                   and path.name != CHECKSUMS)
    assert recorded == {path.relative_to(folder).as_posix():
                        hashlib.sha256(path.read_bytes()).hexdigest() for path in files}
    check_checkpoint(folder)


@pytest.mark.parametrize("file", ["lora_weights/adapter_model.safetensors",
                                  "optimizer_state.pt", "training_step.json"])
def test_bytes_overwritten_in_the_middle_are_named(tmp_path: Path, file: str) -> None:
    """What headers do not show: the file keeps its length and its header (safetensors,
    zip directory) and only its middle is overwritten."""
    folder = _written(CheckpointStore(tmp_path / "state"), 1)
    data = bytearray((folder / file).read_bytes())
    middle, length = len(data) // 2, min(8192, len(data) // 8) or 1
    data[middle:middle + length] = b"\xff" * length
    (folder / file).write_bytes(bytes(data))
    if file != "training_step.json":  # its damage leaves JSON only by chance
        shutil.copytree(folder, tmp_path / "without_checksums")
        (tmp_path / "without_checksums" / CHECKSUMS).unlink()
        check_checkpoint(tmp_path / "without_checksums")  # the headers alone pass
    with pytest.raises(DamagedRunFolder) as raised:
        check_checkpoint(folder)
    assert str(raised.value).startswith(f"{folder / file}: ")


def test_a_file_the_checksums_list_that_is_gone_is_named(tmp_path: Path) -> None:
    folder = _written(CheckpointStore(tmp_path / "state"), 1)
    (folder / "training_step.json").unlink()
    with pytest.raises(DamagedRunFolder, match=r"training_step.json: missing, but .*"
                                               r"checksums.json lists it"):
        check_checkpoint(folder)


def test_checksums_that_are_not_what_a_run_writes_are_refused(tmp_path: Path) -> None:
    folder = _written(CheckpointStore(tmp_path / "state"), 1)
    (folder / CHECKSUMS).write_text(json.dumps({"sha256": {"../../outside": "0" * 64}}))
    with pytest.raises(DamagedRunFolder, match="checksums.json: not the checksums a run"):
        check_checkpoint(folder)


def test_only_the_adapter_is_checked_where_only_the_adapter_is_read(tmp_path: Path) -> None:
    folder = _written(CheckpointStore(tmp_path / "state"), 1)
    (folder / "optimizer_state.pt").write_bytes(b"\xff" * 64)
    check_checkpoint(folder, within="lora_weights")
    with pytest.raises(DamagedRunFolder, match="optimizer_state.pt"):
        check_checkpoint(folder)


def test_a_symbolic_link_in_a_store_is_refused_not_followed(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "run" / "state")
    for step in (1, 2):
        _written(store, step)
    outside = tmp_path / "elsewhere"
    shutil.move(store.path(2), outside)
    store.path(2).symlink_to(outside, target_is_directory=True)
    for refused in (store.steps, lambda: store.prune(keep=1, committed=2),
                    lambda: check_checkpoint(store.path(2))):
        with pytest.raises(DamagedRunFolder, match=f"{store.path(2)}: a symbolic link"):
            refused()
    assert (outside / "optimizer_state.pt").is_file()  # nothing pruned through the link

    store.path(2).unlink()
    shutil.move(outside, store.path(2))
    (store.path(2) / "lora_weights" / "adapter_config.json").unlink()
    (store.path(2) / "lora_weights" / "adapter_config.json").symlink_to(tmp_path / "other")
    with pytest.raises(DamagedRunFolder, match="adapter_config.json: a symbolic link"):
        check_checkpoint(store.path(2))
