"""The evaluate command: a run's checkpoint evaluated again with the run's own settings
gives the run's evaluation file byte for byte (RL and supervised runs, on the tiny model);
changed task parameters evaluate samples the run never saw; bad requests are errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from src.evaluate import main as evaluate_main
from tests.conftest import PROJECT_ROOT
from tests.run_folders import run_command

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 3
  rollout: {{batch_size: 2, group_size: 2, max_batches: 3}}
  evaluation: {{at_start: true, every_n_batches: 2, at_end: true, max_samples: 4,
                temperature: 1.0, splits: [validation]}}
  task:
    name: math_problems
    parameters: {{num_train: 6, num_validation: 4, max_round: 1}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model
      parameters:
        model_name_or_path: {model}
        lora_config: {{r: 8, lora_alpha: 16, target_modules: all-linear}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, temperature: 1.0, max_new_tokens: 6}}
  callback_dict:
    rl_training:
      name: rl_training
      parameters:
        algorithm: grpo
        learning_rate: 5e-2
        ppo: {{entropy_coeff: 0.05}}  # a gradient even where a group's rewards are equal
        best_metric: eval/reward  # best/ is an evaluated step (the first, where all tie)
"""

SUPERVISED = """\
supervised_training_config:
  output_dir: {output}
  random_seed: 5
  language_model:
    name: policy
    module: src.language_models.instance.huggingface_lora_language_model
    parameters:
      model_name_or_path: {model}
      lora_config: {{r: 8, lora_alpha: 16, target_modules: all-linear}}
  task:
    name: math_problems
    parameters: {{num_train: 8, num_validation: 3, max_round: 1}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, max_new_tokens: 4}}
  demonstrations:
    oracle: {{num_samples: 8}}
  training:
    epochs: 2
    batch_size: 4
    save_every_steps: 2
    optimizer: {{learning_rate: 3e-2}}
  evaluation: {{every_steps: 2, max_samples: 3, batch_size: 2, temperature: 1.0}}
"""


def finished_run(folder: Path, template: str, model: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config_file.yaml"
    config.write_text(template.format(output=folder / "run", model=model))
    assert run_command(config) == 0
    return folder / "run"


@pytest.fixture(scope="module")
def rl_run(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_run(tmp_path_factory.mktemp("rl"), ASSIGNMENT, tiny_model_path)


def evaluation(folder: Path, step: int) -> str:
    return (folder / "evaluation" / f"step-{step:06d}.jsonl").read_text()


@pytest.mark.parametrize(("checkpoint", "step"), [("latest", 3), ("2", 2), ("best", None),
                                                  ("start", 0)])
def test_a_checkpoint_evaluated_again_gives_the_runs_own_file(
        rl_run: Path, tmp_path: Path, checkpoint: str, step: int | None,
        capsys: pytest.CaptureFixture[str]) -> None:
    if step is None:
        best = rl_run / "callback_state" / "rl_training" / "best" / "best.json"
        step = json.loads(best.read_text())["step"]
    assert evaluate_main([str(rl_run), "--checkpoint", checkpoint,
                          "--target_dir", str(tmp_path / "out")]) == 0
    assert evaluation(tmp_path / "out", step) == evaluation(rl_run, step)
    episodes = [json.loads(line) for line in evaluation(rl_run, step).split("\n") if line.strip()]
    assert {episode["policy_version"] for episode in episodes} == {step}
    [row] = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    [logged] = [json.loads(line) for line in (rl_run / "metrics.jsonl").open()
                if json.loads(line)["step"] == step and "eval/episodes" in line]
    assert row == {key: value for key, value in logged.items()
                   if key == "step" or key.startswith("eval/")}
    assert "(validation split, success, 95% Wilson interval): " in capsys.readouterr().out


def test_the_checkpoints_differ_so_the_comparison_can_fail(rl_run: Path) -> None:
    assert evaluation(rl_run, 0) != evaluation(rl_run, 3)


def test_changed_task_parameters_evaluate_other_samples(rl_run: Path, tmp_path: Path) -> None:
    assert evaluate_main([str(rl_run), "--checkpoint", "latest", "--task", "seed=7",
                          "--task", "num_validation=6", "--max_samples", "6",
                          "--target_dir", str(tmp_path / "out")]) == 0
    episodes = [json.loads(line) for line in evaluation(tmp_path / "out", 3).split("\n") if line.strip()]
    original = [json.loads(line) for line in evaluation(rl_run, 3).split("\n") if line.strip()]
    assert len(episodes) == 6
    assert [e["chat"][0] for e in episodes[:4]] != [e["chat"][0] for e in original]
    config = (tmp_path / "out" / "config.yaml").read_text()
    assert "seed: 7" in config and "num_validation: 6" in config


def test_a_supervised_runs_checkpoint_gives_its_own_file(
        tiny_model_path: Path, tmp_path: Path) -> None:
    run = finished_run(tmp_path / "sft", SUPERVISED, tiny_model_path)
    for checkpoint in ("2", "latest"):
        target = tmp_path / f"out-{checkpoint}"
        assert evaluate_main([str(run), "--checkpoint", checkpoint,
                              "--target_dir", str(target)]) == 0
        [row] = [json.loads(line) for line in (target / "metrics.jsonl").open()]
        assert evaluation(target, row["step"]) == evaluation(run, row["step"])


@pytest.mark.parametrize(("arguments", "message"), [
    (["--checkpoint", "7"], "is not best, latest or one of the committed steps"),
    (["--task", "seed"], "expected KEY=VALUE"),
    (["--task", "no_such_parameter=1"], "no_such_parameter"),
    (["--task", "levels=[1, 2"], "the value is not YAML"),
    (["--task", "source=file"], "cannot be built"),
])
def test_bad_requests_are_errors_that_say_what_is_wrong(
        rl_run: Path, tmp_path: Path, arguments: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate_main([str(rl_run), *arguments, "--target_dir", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_a_folder_that_is_no_run_is_an_error(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate_main([str(tmp_path), "--target_dir", str(tmp_path / "out")]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_a_run_folder_is_never_the_target(rl_run: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    before = (rl_run / "metrics.jsonl").read_bytes()
    assert evaluate_main([str(rl_run), "--target_dir", str(rl_run)]) == 2
    assert "is a run folder" in capsys.readouterr().err
    assert (rl_run / "metrics.jsonl").read_bytes() == before


PAYLOAD = """\
from pathlib import Path

Path(__file__).with_name("payload_ran").write_text("the run folder's code ran")
"""

ORACLE_RUN = """\
assignment_config:
  output_dir: {output}
  task:
    name: math_problems
    module: {module}
    parameters: {{num_train: 2, num_validation: 2}}
  agent:
    name: oracle_agent
  evaluation: {{at_end: true}}
"""


@pytest.mark.parametrize("where", ["the run folder", "outside the project"])
def test_code_named_by_a_run_folder_is_refused_before_it_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        where: str) -> None:
    # the folder that holds the run is on the import path, as the working directory is
    # under `python -m src.evaluate`: a module path can reach into the run folder
    run = tmp_path / "shared_run_folder"
    code = run if where == "the run folder" else tmp_path / "plugins_elsewhere"
    for folder in (run, code):
        folder.mkdir(exist_ok=True)
    (code / "payload.py").write_text(PAYLOAD)
    module = f"{code.name}.payload"
    (run / "config.yaml").write_text(ORACLE_RUN.format(output=run, module=module))
    (run / "run_state.json").write_text('{"completed_batches": 0, "finished": true}')
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (code.name, module):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert evaluate_main([str(run), "--checkpoint", "start",
                          "--target_dir", str(tmp_path / "evaluated")]) == 2
    assert not (code / "payload_ran").exists()
    error = capsys.readouterr().err
    assert f"refused to import '{code.name}' from {code}: it lies " in error
    assert ("inside the run folder" if where == "the run folder"
            else "outside the project") in error


@pytest.mark.parametrize("command", ["src.evaluate", "src.export"])
def test_the_help_says_no_code_is_imported_from_a_run_folder(command: str) -> None:
    result = subprocess.run([sys.executable, "-m", command, "--help"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, check=True)
    assert "imports no code from a run folder" in " ".join(result.stdout.split())
