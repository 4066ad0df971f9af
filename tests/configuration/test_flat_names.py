"""LifelongAgentBench's flat names for the RL trainer's settings: read once, as the grouped
key (or the task's parameter) each stands for; every shipped recipe writes the grouped
form, and the seed's example still runs as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from src.configuration.components import COMPONENTS, import_component_class
from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.online_training.flat_names import translate_flat_names
from src.online_training.plan import load_online_config, plan_online_training
from src.online_training.run import PIPELINE as ONLINE
from src.online_training.trainer import RLTrainer
from src.run.folder import RunDirectory, RunState
from src.run.resume import config_changes
from src.run.trainer import Trainer
from src.run_experiment import main

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT_ROOT / "configs" / "assignments" / "rl_training_example.yaml"
# the issue's eight, and the trainer workers' names before they became a group
ALIASES = {"algorithm", "learning_rate", "optimizer_class", "gradient_accumulation_steps",
           "reward_weight", "reward_correct", "reward_incorrect", "reward_timeout",
           "num_trainer_workers", "cpus_per_trainer_worker", "gpus_per_trainer_worker"}
SHIPPED = sorted({*PROJECT_ROOT.glob("configs/assignments/*.yaml"),
                  *PROJECT_ROOT.glob("experiments/*/configs/*.yaml"),
                  *PROJECT_ROOT.glob("examples/**/*.yaml")})


def rl_trainer_parameters(data: Any) -> list[dict[str, Any]]:
    """The parameters of each callback that resolves to the RL trainer (by its class, not
    its key), as the file writes them."""
    callbacks = (data.get("assignment_config") or {}).get("callback_dict") or {}
    found = []
    for spec in callbacks.values():
        cls = (import_component_class(spec["module"], Trainer) if spec.get("module")
               else COMPONENTS[spec["name"]])
        if issubclass(cls, RLTrainer):
            found.append(spec.get("parameters") or {})
    return found


def test_shipped_recipes_give_the_rl_trainer_grouped_names_only() -> None:
    checked = 0
    for path in SHIPPED:
        if path == EXAMPLE:
            continue
        for parameters in rl_trainer_parameters(YamlSource(path).data):
            checked += 1
            assert not ALIASES & set(parameters), (path, sorted(ALIASES & set(parameters)))
    assert checked >= 20  # the recipes were found


def test_the_seed_example_keeps_its_flat_names() -> None:
    (parameters,) = rl_trainer_parameters(YamlSource(EXAMPLE).data)
    assert parameters == {"algorithm": "reinforce", "learning_rate": 1e-5,
                          "reward_weight": 1.0, "seed": 42}


GROUPED_EXAMPLE_PARAMETERS = """\
      parameters:
        advantage: {estimator: reinforce}
        optimizer: {learning_rate: 1e-5}
        reward: {weight: 1.0}
        seed: 42
"""


def grouped_example(tmp_path: Path) -> Path:
    text = EXAMPLE.read_text()
    head, _, _ = text.partition("      parameters:\n        algorithm:")
    path = tmp_path / "grouped.yaml"
    path.write_text(head + GROUPED_EXAMPLE_PARAMETERS)
    return path


def test_the_seed_example_reads_as_its_grouped_spelling(tmp_path: Path) -> None:
    flat_config, flat_source = load_online_config(EXAMPLE)
    grouped_config, grouped_source = load_online_config(grouped_example(tmp_path))
    assert flat_config.model_dump() == grouped_config.model_dump()
    flat = plan_online_training(flat_config, flat_source).trainers["rl_training"].parameters
    grouped = plan_online_training(grouped_config, grouped_source).trainers["rl_training"].parameters
    assert flat == grouped
    assert flat["advantage"].estimator == "reinforce"
    assert flat["optimizer"].learning_rate == 1e-5


def test_the_seed_example_passes_a_dry_run(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(PROJECT_ROOT)
    assert main(["--config_path", str(EXAMPLE), "--dry_run"]) == 0
    assert "RLTrainer" in capsys.readouterr().out


def example_with_parameters(tmp_path: Path, parameters: str, task: str | None = None) -> Path:
    """The seed example with these RL trainer parameters (YAML lines) in place of its own,
    and another task where given."""
    data = yaml.safe_load(EXAMPLE.read_text())
    assignment = data["assignment_config"]
    assignment["callback_dict"]["rl_training"]["parameters"] = {"seed": 42}
    if task is not None:
        assignment["task"] = yaml.safe_load(task)
    text = yaml.safe_dump(data, sort_keys=False).replace(
        "      parameters:\n        seed: 42\n", "      parameters:\n" + parameters)
    path = tmp_path / "assignment.yaml"
    path.write_text(text)
    return path


def line_of(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), start=1)
                if text in line)


def test_a_setting_given_both_ways_must_agree(tmp_path: Path) -> None:
    path = example_with_parameters(tmp_path, "        learning_rate: 1e-3\n"
                                             "        optimizer: {learning_rate: 1e-4}\n")
    with pytest.raises(ConfigError, match=r"optimizer\.learning_rate") as raised:
        load_online_config(path)
    assert raised.value.line == line_of(path, "learning_rate: 1e-3")
    assert raised.value.file == str(path)


def test_a_setting_given_both_ways_with_one_value_is_one_setting(tmp_path: Path) -> None:
    path = example_with_parameters(
        tmp_path, "        learning_rate: 1e-3\n"
                  "        optimizer: {learning_rate: 0.001, max_grad_norm: 2.0}\n"
                  "        num_trainer_workers: 1\n")
    config, _ = load_online_config(path)
    parameters = config.assignment_config.callback_dict["rl_training"].parameters
    assert parameters == {"optimizer": {"learning_rate": 1e-3, "max_grad_norm": 2.0},
                          "trainer_workers": {"count": 1}}


def test_an_error_in_a_translated_setting_names_the_flat_line(tmp_path: Path) -> None:
    path = example_with_parameters(tmp_path, "        algorithm: ppo\n")
    with pytest.raises(ConfigError, match=r"advantage\.estimator") as raised:
        plan_online_training(*load_online_config(path))
    assert raised.value.line == line_of(path, "algorithm: ppo")


def test_the_callback_is_found_by_its_class_not_its_key(tmp_path: Path) -> None:
    path = example_with_parameters(tmp_path, "        learning_rate: 1e-3\n")
    text = path.read_text().replace("    rl_training:\n", "    trainer:\n")
    path.write_text(text)
    config, _ = load_online_config(path)
    assert config.assignment_config.callback_dict["trainer"].parameters["optimizer"] == {
        "learning_rate": 1e-3}


def test_outcome_rewards_become_the_task_s_own(tmp_path: Path) -> None:
    path = example_with_parameters(tmp_path, "        reward_correct: 2.0\n"
                                             "        reward_timeout: -0.5\n")
    plan = plan_online_training(*load_online_config(path))
    assert plan.task.parameters["reward_correct"] == 2.0
    assert plan.task.parameters["reward_timeout"] == -0.5
    assert plan.task.parameters["reward_incorrect"] == -0.1  # the task's default


def test_outcome_rewards_given_to_both_must_agree(tmp_path: Path) -> None:
    task = "{name: db_bench_single_skill, parameters: {num_train: 8, reward_correct: 1.0}}"
    path = example_with_parameters(tmp_path, "        reward_correct: 2.0\n", task)
    with pytest.raises(ConfigError, match=r"task\.parameters\.reward_correct") as raised:
        load_online_config(path)
    assert raised.value.line == line_of(path, "reward_correct: 2.0")


def test_outcome_rewards_need_a_task_that_takes_them(tmp_path: Path) -> None:
    task = "{name: math_problems, parameters: {num_train: 8}}"
    path = example_with_parameters(tmp_path, "        reward_incorrect: -1.0\n", task)
    with pytest.raises(ConfigError, match=r"MathProblemsTask takes no 'reward_incorrect'") as raised:
        load_online_config(path)
    assert raised.value.line == line_of(path, "reward_incorrect: -1.0")


def test_a_run_folder_s_flat_config_compares_equal_to_its_grouped_spelling(
        tmp_path: Path) -> None:
    """A run folder written before keeps flat names in its config.yaml (plain YAML, as the
    run wrote it); translated the same way, it is the run a grouped config describes."""
    grouped = load_online_config(grouped_example(tmp_path))[0].model_dump(mode="json")
    written_before = yaml.safe_load(yaml.safe_dump(grouped))  # the resolved config, as dumped
    written_before["assignment_config"]["callback_dict"]["rl_training"]["parameters"] = (
        rl_trainer_parameters(YamlSource(EXAMPLE).data)[0])  # ... with the flat names
    stored = tmp_path / "config.yaml"
    stored.write_text(yaml.safe_dump(written_before, sort_keys=False))
    assert config_changes(written_before, grouped, ONLINE.resume_rules.resume_safe)  # what the translation mends
    data = yaml.safe_load(stored.read_text())
    translate_flat_names(data, stored)
    assert config_changes(data, grouped, ONLINE.resume_rules.resume_safe) == []
    # and the run folder resumes with the grouped config
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text(stored.read_text())
    RunDirectory(folder).write_state(RunState())
    config = load_online_config(grouped_example(tmp_path))[0]
    assert RunDirectory(folder).start(config, stored) == RunState()


def test_errors_in_a_file_read_as_plain_yaml_name_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["assignment_config"]["callback_dict"]["rl_training"]["parameters"]["advantage"] = {
        "estimator": "grpo"}
    with pytest.raises(ConfigError, match=r"config\.yaml, key .*algorithm.*'reinforce', but "
                                          r"'advantage\.estimator' is 'grpo'"):
        translate_flat_names(data, tmp_path / "config.yaml")
