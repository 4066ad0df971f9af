"""Damage that a file's header does not show, through the commands: a checkpoint's files
are checked against the sha256 it recorded on resume, evaluate and export (exit status 2,
naming the file and the earlier checkpoints kept); a checkpoint written before checksums
were kept still resumes, and what damage it hides (weights that are not finite numbers,
generator or optimiser state of the wrong shape) is named when it loads. A checkpoint
linked out of the run folder, or a best/ naming a step the run never reached, is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from src.evaluate import main as evaluate_main
from src.export.__main__ import main as export_main
from src.storage.checkpoint_store import BEST, CHECKSUMS
from tests.run import test_folder
from tests.run.test_folder import LATEST, STORE, copied, resume

killed_run = test_folder.killed_run  # the fixture: a killed run every test here copies

ADAPTER_WEIGHTS = LATEST / "lora_weights" / "adapter_model.safetensors"
EARLIER_KEPT = "checkpoint-000002, checkpoint-000003"


def overwrite_middle(path: Path) -> None:
    """8 KB of 0xFF (NaN in every float format) in the middle of the file, or a quarter of
    it where it is smaller: its length and its header stay as they were."""
    data = bytearray(path.read_bytes())
    length = min(8192, len(data) // 4)
    middle = len(data) // 2
    data[middle:middle + length] = b"\xff" * length
    path.write_bytes(bytes(data))


def without_checksums(run: Path) -> Path:
    """The run folder as a run before checksums were kept wrote it."""
    for path in run.rglob(CHECKSUMS):
        path.unlink()
    return run


def commands(run: Path, tmp_path: Path, checkpoint: str) -> list[int]:
    """Evaluate's and export's exit status on `checkpoint` of `run`."""
    return [evaluate_main([str(run), "--checkpoint", checkpoint,
                           "--target_dir", str(tmp_path / "evaluated")]),
            export_main([str(run), "--checkpoint", checkpoint, "--adapter_only",
                         "--target_dir", str(tmp_path / "exported")])]


def test_bytes_overwritten_in_the_middle_are_named_by_resume_evaluate_and_export(
        killed_run: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = copied(killed_run, tmp_path)
    assert (run / LATEST / CHECKSUMS).is_file() and (run / STORE / BEST / CHECKSUMS).is_file()
    overwrite_middle(run / ADAPTER_WEIGHTS)
    before = (run / "runs.jsonl").read_bytes()
    assert resume(killed_run[0], run) == 2
    error = capsys.readouterr().err
    assert f"{run / ADAPTER_WEIGHTS}: not the file the run wrote" in error
    assert EARLIER_KEPT in error and f"remove {run / LATEST}" in error
    assert (run / "runs.jsonl").read_bytes() == before
    assert commands(run, tmp_path, "latest") == [2, 2]
    for output in capsys.readouterr().err.splitlines():
        assert f"{run / ADAPTER_WEIGHTS}: not the file the run wrote" in output


def test_a_checkpoint_without_checksums_resumes(killed_run: tuple[Path, Path],
                                                tmp_path: Path) -> None:
    run = without_checksums(copied(killed_run, tmp_path))
    assert resume(killed_run[0], run) == 0
    assert json.loads((run / "run_state.json").read_text())["finished"]
    assert (run / STORE / "checkpoint-000005" / CHECKSUMS).is_file()  # those after keep them


def _negative_python_word(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    state["python"][1].fill_(-1)
    torch.save(state, path)


def _optimizer_of_another_shape(path: Path) -> None:
    torch.save({"optimizer": {"state": {}, "param_groups": []}, "scheduler": None}, path)


@pytest.mark.parametrize(("file", "damage", "problem"), [
    (ADAPTER_WEIGHTS, overwrite_middle, "hold values that are not finite numbers"),
    (LATEST / "rng_state.pt", _negative_python_word,
     "not the random-generator state a checkpoint holds"),
    (LATEST / "optimizer_state.pt", _optimizer_of_another_shape,
     "not the state of this trainer's optimiser"),
])
def test_damage_a_checkpoint_without_checksums_hides_is_named_when_it_loads(
        killed_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        file: Path, damage, problem: str) -> None:
    run = without_checksums(copied(killed_run, tmp_path))
    damage(run / file)
    assert resume(killed_run[0], run) == 2
    error = capsys.readouterr().err
    assert "run folder error" in error and problem in error
    assert str(run / (file.parent if file == ADAPTER_WEIGHTS else file)) in error
    assert EARLIER_KEPT in error and f"remove {run / LATEST}" in error


def test_a_checkpoint_linked_out_of_the_run_folder_is_refused(
        killed_run: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = copied(killed_run, tmp_path)
    linked = run / STORE / "checkpoint-000003"
    shutil.move(linked, tmp_path / "elsewhere")
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert resume(killed_run[0], run) == 2
    assert f"{linked}: a symbolic link (to {tmp_path / 'elsewhere'})" in capsys.readouterr().err
    assert (tmp_path / "elsewhere" / "optimizer_state.pt").is_file()
    assert commands(run, tmp_path, "latest") == [2, 2]
    assert capsys.readouterr().err.count(f"{linked}: a symbolic link") == 2


def test_a_best_record_naming_a_step_the_run_never_reached_is_refused(
        killed_run: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = copied(killed_run, tmp_path)
    mark = run / STORE / BEST / "best.json"
    mark.write_text(json.dumps({**json.loads(mark.read_text()), "step": 99}))
    assert commands(run, tmp_path, "best") == [2, 2]
    assert capsys.readouterr().err.count(f"{mark}: names step 99") == 2
    assert resume(killed_run[0], run) == 2
    assert f"{mark}: names step 99, which this run never reached" in capsys.readouterr().err
