"""A damaged run folder is refused on resume with exit status 2 and a message that names
the file, what is wrong with it and what to do, before any weights load; a corrupt latest
checkpoint names the earlier ones kept, and removing it (as the message says) resumes from
the one before, ending where an undamaged resume ends."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.torch import load_file

from src.evaluate import main as evaluate_main
from src.export.__main__ import main as export_main
from tests.run.crash_in_batch import run_until_crash
from tests.run_folders import final_checkpoint, jsonl_rows, run_command

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 11
  rollout: {{batch_size: 2, group_size: 2, max_batches: 5}}
  task:
    name: math_problems
    parameters: {{num_train: 10, num_validation: 2, max_round: 1}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model
      parameters:
        model_name_or_path: {model}
        lora_config: {{r: 4, lora_alpha: 8, target_modules: all-linear}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, temperature: 1.0, max_new_tokens: 4}}
  callback_dict:
    rl_training:
      name: rl_training
      parameters:
        algorithm: grpo
        learning_rate: 5e-2
        ppo: {{entropy_coeff: 0.05}}
"""
STORE = Path("callback_state") / "rl_training"
LATEST = STORE / "checkpoint-000004"


@pytest.fixture(scope="module")
def killed_run(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, Path]:
    """(config, run folder) of a run killed in batch 5 of 5: checkpoints 2, 3 and 4 kept."""
    folder = tmp_path_factory.mktemp("killed")
    config = folder / "assignment.yaml"
    config.write_text(ASSIGNMENT.format(output=folder / "run", model=tiny_model_path))
    run_until_crash(config, batch_index=4)
    # the crashing callback's own store: a run killed from outside has none
    shutil.rmtree(folder / "run" / "callback_state" / "crash")
    assert sorted(path.name for path in (folder / "run" / STORE).glob("checkpoint-*")) == [
        "checkpoint-000002", "checkpoint-000003", "checkpoint-000004"]
    return config, folder / "run"


def copied(killed_run: tuple[Path, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(killed_run[1], copy)
    return copy


def resume(config: Path, run: Path) -> int:
    return run_command(config, "--output_dir", str(run))


def cut_to_half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def empty(path: Path) -> None:
    path.write_bytes(b"")


# (what is damaged, how, what the message must say beyond the file's path)
DAMAGE: dict[str, tuple[str, Callable[[Path], None], list[str]]] = {
    "python tag in config.yaml": (
        "config.yaml", lambda p: p.write_text(p.read_text().replace(
            "assignment_config:", "assignment_config: !!python/object:os.system", 1)),
        ["tag", "!!python/object:os.system"]),
    "custom tag in config.yaml": (
        "config.yaml", lambda p: p.write_text(p.read_text().replace(
            "random_seed: 11", "random_seed: !seed 11", 1)), ["tag", "!seed"]),
    "empty run_state.json": ("run_state.json", empty, ["empty (0 bytes)"]),
    "run_state.json not JSON": (
        "run_state.json", lambda p: p.write_text('{"completed_batches": 4,'), ["not JSON"]),
    "empty adapter_config.json": (
        str(LATEST / "lora_weights" / "adapter_config.json"), empty, ["empty (0 bytes)"]),
    "empty adapter weights": (
        str(LATEST / "lora_weights" / "adapter_model.safetensors"), empty,
        ["empty (0 bytes)"]),
    "truncated adapter weights": (
        str(LATEST / "lora_weights" / "adapter_model.safetensors"), cut_to_half,
        ["not a whole safetensors file"]),
    "truncated optimizer state": (
        str(LATEST / "optimizer_state.pt"), cut_to_half, ["not a whole torch file"]),
    "empty rng state": (str(LATEST / "rng_state.pt"), empty, ["empty (0 bytes)"]),
}
IN_A_CHECKPOINT = [name for name, (file, _, _) in DAMAGE.items() if file.startswith("callback")]


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_file_is_named_with_its_problem_and_exit_status_2(
        killed_run: tuple[Path, Path], tmp_path: Path, case: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    file, damage, expected = DAMAGE[case]
    run = copied(killed_run, tmp_path)
    damage(run / file)
    before = (run / "runs.jsonl").read_bytes()
    assert resume(killed_run[0], run) == 2
    error = capsys.readouterr().err
    assert "run folder error" in error
    assert str(run / file) in error
    for text in expected:
        assert text in error
    if case in IN_A_CHECKPOINT:
        assert "checkpoint-000002, checkpoint-000003" in error  # the earlier ones kept
        assert f"remove {run / LATEST}" in error
    else:
        assert "--new_run" in error or "restore" in error
    assert (run / "runs.jsonl").read_bytes() == before  # nothing cut back


def test_a_missing_config_yaml_is_named_not_taken_for_a_changed_config(
        killed_run: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = copied(killed_run, tmp_path)
    (run / "config.yaml").unlink()
    assert resume(killed_run[0], run) == 2
    error = capsys.readouterr().err
    assert f"{run / 'config.yaml'} is missing" in error
    assert "different config" not in error


def test_a_damaged_candidate_of_a_timestamped_output_dir_is_named(
        killed_run: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "2024-01-01-00-00-00"
    shutil.copytree(killed_run[1], run)
    empty(run / "run_state.json")
    assert run_command(killed_run[0], "--output_dir", str(tmp_path / "{TIMESTAMP}")) == 2
    error = capsys.readouterr().err
    assert f"{run / 'run_state.json'}: empty (0 bytes)" in error
    assert "--new_run" in error


def test_removing_a_corrupt_latest_checkpoint_resumes_from_the_one_before(
        killed_run: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = killed_run[0]
    undamaged = copied(killed_run, tmp_path / "undamaged")
    assert resume(config, undamaged) == 0

    run = copied(killed_run, tmp_path / "damaged")
    cut_to_half(run / LATEST / "lora_weights" / "adapter_model.safetensors")
    assert resume(config, run) == 2
    assert f"remove {run / LATEST}" in capsys.readouterr().err
    shutil.rmtree(run / LATEST)  # as the message says
    assert resume(config, run) == 0
    assert "resuming from checkpoint-000003" in capsys.readouterr().out

    # batches 4 and 5 redone from checkpoint 3: every episode and step logged once, and the
    # same adapter at the end as the resume that lost nothing (CPU runs are bit-identical)
    for folder in (run, undamaged):
        rows = jsonl_rows(folder / "runs.jsonl")
        assert sorted({row["batch_index"] for row in rows}) == list(range(5))
        assert len(rows) == 5 * 2 * 2
        assert [row["step"] for row in jsonl_rows(folder / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    ours, theirs = (load_file(final_checkpoint(folder, "rl_training") / "lora_weights"
                              / "adapter_model.safetensors") for folder in (run, undamaged))
    assert ours.keys() == theirs.keys()
    assert all(ours[key].equal(theirs[key]) for key in ours)


@pytest.mark.parametrize("case", ["empty run_state.json", "python tag in config.yaml",
                                  "empty adapter_config.json", "truncated adapter weights"])
def test_evaluate_and_export_name_the_damaged_file_too(
        killed_run: tuple[Path, Path], tmp_path: Path, case: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    file, damage, expected = DAMAGE[case]
    run = copied(killed_run, tmp_path)
    damage(run / file)
    assert evaluate_main([str(run), "--checkpoint", "latest",
                          "--target_dir", str(tmp_path / "evaluated")]) == 2
    evaluate_error = capsys.readouterr().err
    commands = [evaluate_error]
    if file != "config.yaml":  # export reads no config
        assert export_main([str(run), "--checkpoint", "latest", "--adapter_only",
                            "--target_dir", str(tmp_path / "exported")]) == 2
        commands.append(capsys.readouterr().err)
    for error in commands:
        assert str(run / file) in error
        for text in expected:
            assert text in error

