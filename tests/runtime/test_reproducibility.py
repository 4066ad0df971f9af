"""The reproducible mode: the setting, what it turns on, that every pipeline applies it,
and what it buys: two runs of one seeded config, and a run SIGKILLed and resumed, end with
the same bytes (runs.jsonl, the adapter, the evaluation), on the CPU and, where torch sees
one, on a GPU; on the CPU the bytes are those of a run without the mode."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bench.gpu_reproducibility import RECIPE
from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
)
from src.language_models.rollout_pool.engine_actor import EngineActor
from src.offline_training.config import load_offline_config, plan_offline_training
from src.offline_training.run import build_policy
from src.online_training.plan import build_language_models
from src.runtime import reproducibility
from src.supervised_training.config import load_supervised_config, plan_supervised_training
from src.supervised_training.run import build_parts
from tests.configuration.test_config_errors import VALID, plan, write
from tests.conftest import PROJECT_ROOT
from tests.run_folders import final_checkpoint, kill_after_commits, run_in_new_process
from tests.supervised_training.test_supervised_run import write_config as supervised_config
from tests.training.test_offline_trainer import write_config as offline_config

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="torch sees no GPU here; bench/gpu_check.sh runs this test on one"))]

# bench/gpu_reproducibility.py's recipe on the tiny model, 6 batches of 2 samples; its task
# sleeps a little a step, so that a kill lands mid-run
SLOW_MATH = ("{name: slow_math, module: tests.run.slow_math_task.SlowMathTask, "
             "parameters: {num_train: 12, num_validation: 2}}")


# ---- the setting -----------------------------------------------------------------------
def test_the_setting_is_on_by_default_and_checked(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path / "out")
    assert plan(write(tmp_path, text)).config.assignment_config.reproducible is True
    off = text.replace("  rollout:", "  reproducible: false\n  rollout:")
    assert plan(write(tmp_path, off)).config.assignment_config.reproducible is False
    with pytest.raises(ConfigError, match=r"assignment_config\.reproducible.*bool"):
        plan(write(tmp_path, off.replace("reproducible: false", "reproducible: sometimes")))
    with pytest.raises(ConfigError, match=r"assignment_config\.reproducable.*Extra inputs"):
        plan(write(tmp_path, off.replace("reproducible: false", "reproducable: false")))


# ---- what it turns on ------------------------------------------------------------------
@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The engines' settings as a new process has them; the mode back on afterwards (as
    tests/conftest.py keeps it for every test)."""
    monkeypatch.setattr(reproducibility, "_on", False)
    monkeypatch.delenv(reproducibility.CUBLAS_WORKSPACE_VARIABLE, raising=False)
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    monkeypatch.undo()
    reproducibility._on = False
    reproducibility.make_reproducible()


def test_every_engine_is_switched_to_deterministic_kernels_once(
        fresh_process: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=reproducibility.__name__):
        reproducibility.make_reproducible()
        reproducibility.make_reproducible()
    assert torch.are_deterministic_algorithms_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    # torch runs these deterministically in this mode; the math kernel is the fallback
    assert torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.math_sdp_enabled()
    assert reproducibility.is_reproducible()
    [line] = caplog.messages
    assert line.startswith("reproducible: deterministic kernels on")
    assert ("may cost speed on CUDA" in line) == torch.cuda.is_available()


def test_a_workspace_layout_given_is_kept_and_a_late_one_is_warned_about(
        fresh_process: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # cuBLAS's other deterministic one
    reproducibility.make_reproducible()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    monkeypatch.setattr(reproducibility, "_on", False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    reproducibility.make_reproducible()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "CUDA was started before the reproducible mode" in warning


# ---- every pipeline applies it before its models --------------------------------------
def with_setting(config: Path, before: str, reproducible: bool) -> Path:
    """The config file with `reproducible` written in above the line `before`."""
    text = config.read_text()
    assert before in text
    config.write_text(text.replace(before, f"  reproducible: {str(reproducible).lower()}\n"
                                           f"{before}", 1))
    return config


def build_assignment(folder: Path, model: Path, reproducible: bool) -> None:
    config = write(folder, VALID.format(output=folder / "out"))
    build_language_models(plan(with_setting(config, "  rollout:", reproducible)))


def build_supervised(folder: Path, model: Path, reproducible: bool) -> None:
    source = YamlSource(with_setting(supervised_config(folder, "out", model), "  random_seed:",
                                     reproducible))
    _, task, _ = build_parts(plan_supervised_training(load_supervised_config(source), source))
    task.close()


def build_offline(folder: Path, model: Path, reproducible: bool) -> None:
    source = YamlSource(with_setting(offline_config(folder, "out", model), "  random_seed:",
                                     reproducible))
    build_policy(plan_offline_training(load_offline_config(source), source))


@pytest.mark.parametrize("build", [build_assignment, build_supervised, build_offline])
@pytest.mark.parametrize("reproducible", [True, False])
def test_each_pipeline_applies_the_setting_when_it_builds_its_models(
        tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch,
        build: Callable[[Path, Path, bool], None], reproducible: bool) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(reproducibility, "make_reproducible", lambda: calls.append(True))
    build(tmp_path, tiny_model_path, reproducible)
    assert calls == [True] * reproducible


# ---- what it buys ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Callable[..., Path]:
    """`finished_run(device, name, reproducible=True, kill_after=None)`: the output folder
    of the assignment run to its end in new processes (SIGKILLed once after `kill_after`
    commits, then resumed by the same command), each run made once per module."""
    folder = tmp_path_factory.mktemp("reproducible")
    made: dict[tuple, Path] = {}

    def finished(device: str, name: str, reproducible: bool = True,
                 kill_after: int | None = None) -> Path:
        key = (device, name, reproducible, kill_after)
        if key not in made:
            output = folder / f"{device}-{name}"
            config = folder / f"{device}-{name}.yaml"
            config.write_text(RECIPE.format(
                output=output, reproducible=str(reproducible).lower(), batch_size=2,
                batches=6, task=SLOW_MATH, model=tiny_model_path, device=device,
                new_tokens=6))
            if kill_after is not None:
                kill_after_commits(config, output, kill_after)
            run_in_new_process(config)
            made[key] = output
        return made[key]

    return finished


def assert_same_bytes(expected: Path, actual: Path) -> None:
    """runs.jsonl, the final checkpoint's adapter (tensor by tensor, then byte by byte) and
    the evaluation files of two finished runs."""
    assert (expected / "runs.jsonl").read_bytes() == (actual / "runs.jsonl").read_bytes()
    adapters = [final_checkpoint(output, "rl") / "lora_weights" / "adapter_model.safetensors"
                for output in (expected, actual)]
    tensors = [load_file(adapter) for adapter in adapters]
    assert tensors[0].keys() == tensors[1].keys()
    assert [name for name in tensors[0]
            if not torch.equal(tensors[0][name], tensors[1][name])] == []
    assert any(t.abs().max() > 0 for name, t in tensors[0].items() if "lora_B" in name)
    assert adapters[0].read_bytes() == adapters[1].read_bytes()
    evaluations = sorted(path.name for path in (expected / "evaluation").glob("*.jsonl"))
    assert evaluations and evaluations == sorted(
        path.name for path in (actual / "evaluation").glob("*.jsonl"))
    for name in evaluations:
        assert ((expected / "evaluation" / name).read_bytes()
                == (actual / "evaluation" / name).read_bytes())


@pytest.mark.parametrize("device", DEVICES)
def test_two_runs_of_a_seeded_config_give_the_same_bytes(
        finished_run: Callable[..., Path], device: str) -> None:
    assert_same_bytes(finished_run(device, "straight"), finished_run(device, "again"))


@pytest.mark.parametrize("device", DEVICES)
def test_a_run_killed_and_resumed_gives_the_bytes_of_an_uninterrupted_one(
        finished_run: Callable[..., Path], device: str) -> None:
    assert_same_bytes(finished_run(device, "straight"),
                      finished_run(device, "killed", kill_after=2))


def test_on_the_cpu_the_mode_changes_no_bit(finished_run: Callable[..., Path]) -> None:
    assert_same_bytes(finished_run("cpu", "straight"),
                      finished_run("cpu", "without", reproducible=False))


@pytest.mark.parametrize("reproducible", [True, False])
def test_a_pool_engine_applies_the_mode_it_is_started_in(
        tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        reproducible: bool) -> None:
    calls: list[bool] = []
    monkeypatch.setattr("src.runtime.worker_process.make_reproducible",
                        lambda: calls.append(True))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the engine's adapter folder
    EngineActor(HuggingfaceLoRALanguageModel, {"model_name_or_path": str(tiny_model_path)},
                num_threads=0, reproducible=reproducible)
    assert calls == [True] * reproducible


def test_adapter_files_are_the_same_bytes_whichever_process_writes_them(
        tiny_model_path: Path, tmp_path: Path) -> None:
    """`all-linear` resolves to a set of module names: written in hash order, a resumed
    run's checkpoints would differ from an uninterrupted one's in adapter_config.json."""
    script = ("import sys, torch\n"
              "from src.language_models.instance.huggingface_lora_language_model import "
              "HuggingfaceLoRALanguageModel\n"
              "torch.manual_seed(0)\n"
              "HuggingfaceLoRALanguageModel(sys.argv[1]).save_adapter(__import__('pathlib')"
              ".Path(sys.argv[2]))\n")
    written = []
    for hash_seed in ("1", "2"):
        folder = tmp_path / hash_seed
        subprocess.run([sys.executable, "-c", script, str(tiny_model_path), str(folder)],
                       check=True, cwd=PROJECT_ROOT,
                       env={**os.environ, "PYTHONHASHSEED": hash_seed})
        written.append(folder)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (written[0] / name).read_bytes() == (written[1] / name).read_bytes()
