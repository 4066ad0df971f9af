"""A registered component's `module` that names the class its `name` does is dropped as a
config is read: the recipe with the module line and the recipe without it are one config,
and a run started from either resumes from the other."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from src.configuration.short_names import drop_registered_modules
from src.configuration.yaml_source import YamlSource
from src.offline_training.config import load_offline_config
from src.online_training.config import OnlineExperimentConfig
from src.online_training.plan import load_online_config
from src.online_training.run import PIPELINE as ONLINE
from src.online_training.trainer import RLTrainer
from src.run.folder import CONFIG_FILE, RunDirectory, RunState
from src.run.resume import TIMESTAMP, with_new_fields

PROJECT_ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = PROJECT_ROOT / "configs" / "assignments" / "math_grpo_quickstart.yaml"
OFFLINE = PROJECT_ROOT / "configs" / "assignments" / "offline_grpo.yaml"
# the paths LifelongAgentBench's configs, and this project's recipes before, wrote
OLD_PATHS = {"task": "src.tasks.instance.math_problems.task.MathProblemsTask",
             "agent": "src.agents.instance.lora_rl_agent",  # a module path: its one class
             "trainer": "src.callbacks.instance.rl_training_callback.RLTrainingCallback"}


class OwnTrainer(RLTrainer):
    """A user's trainer: named by `module` beside the registered name it derives from."""


def with_module_lines(data: dict[str, Any], trainer: str = OLD_PATHS["trainer"]
                      ) -> dict[str, Any]:
    """The quickstart as the recipes wrote it with a `module` beside each registered name."""
    old = copy.deepcopy(data)
    assignment = old["assignment_config"]
    assignment["task"]["module"] = OLD_PATHS["task"]
    assignment["agent"]["module"] = OLD_PATHS["agent"]
    assignment["callback_dict"]["rl_training"]["module"] = trainer
    return old


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_module_naming_the_registered_class_is_dropped() -> None:
    data = with_module_lines(YamlSource(QUICKSTART).data)
    language_model = data["assignment_config"]["language_model_list"][0]
    drop_registered_modules(data, OnlineExperimentConfig)
    assignment = data["assignment_config"]
    assert assignment["task"]["module"] is None
    assert assignment["agent"]["module"] is None
    assert assignment["callback_dict"]["rl_training"]["module"] is None
    # a language model's `name` is its name in the run, not a registered one: kept
    assert language_model["module"].endswith("HuggingfaceLoRALanguageModel")


def test_a_module_naming_another_class_is_kept() -> None:
    own = f"{__name__}.OwnTrainer"
    data = with_module_lines(YamlSource(QUICKSTART).data, trainer=own)
    data["assignment_config"]["task"]["name"] = "not_registered"
    drop_registered_modules(data, OnlineExperimentConfig)
    assert data["assignment_config"]["callback_dict"]["rl_training"]["module"] == own
    assert data["assignment_config"]["task"]["module"] == OLD_PATHS["task"]
    # and one that does not import is left for planning to report
    broken = with_module_lines(YamlSource(QUICKSTART).data, trainer="src.nowhere.Trainer")
    drop_registered_modules(broken, OnlineExperimentConfig)
    assert broken["assignment_config"]["callback_dict"]["rl_training"]["module"] == (
        "src.nowhere.Trainer")


def test_both_spellings_are_one_config(tmp_path: Path) -> None:
    short = load_online_config(QUICKSTART)[0]
    old = load_online_config(write(tmp_path / "old.yaml",
                                   with_module_lines(YamlSource(QUICKSTART).data)))[0]
    assert old == short
    # a nested section's components too (the offline pipeline's evaluation)
    offline = YamlSource(OFFLINE).data
    old_offline = copy.deepcopy(offline)
    old_offline["offline_training_config"]["evaluation"]["agent"]["module"] = (
        OLD_PATHS["agent"])
    assert (load_offline_config(YamlSource(write(tmp_path / "offline.yaml", old_offline)))
            == load_offline_config(YamlSource(OFFLINE)))


def unfinished_run(root: Path, stored: dict[str, Any]) -> Path:
    """A run folder with one committed batch whose config.yaml is `stored`."""
    folder = root / "2026-01-01-00-00-00"
    folder.mkdir(parents=True)
    write(folder / CONFIG_FILE, stored)
    RunDirectory(folder).write_state(RunState(completed_batches=1))
    return folder


def test_a_run_started_with_module_lines_resumes_from_the_short_recipe(
        tmp_path: Path) -> None:
    """The config.yaml a run wrote before the recipes dropped their module lines holds
    them; the recipe without them finds that run and resumes it."""
    short = load_online_config(QUICKSTART)[0]
    # what the run folder holds: the old recipe validated and dumped as it was then
    stored = OnlineExperimentConfig.model_validate(
        with_module_lines(YamlSource(QUICKSTART).data)).model_dump(mode="json")
    assert stored["assignment_config"]["agent"]["module"] == OLD_PATHS["agent"]
    folder = unfinished_run(tmp_path / "runs", stored)
    pattern = str(tmp_path / "runs" / TIMESTAMP)
    assert RunDirectory.resolve(pattern, short, rules=ONLINE.resume_rules).path == folder
    # and the dropped modules are not settings new to the code (which a resume announces)
    read = RunDirectory(folder).stored_config(ONLINE.resume_rules.translate)
    assert with_new_fields(OnlineExperimentConfig, read)[1] == []
    # a module naming another class is another run: a new folder
    other = OnlineExperimentConfig.model_validate(with_module_lines(
        YamlSource(QUICKSTART).data, trainer=f"{__name__}.OwnTrainer"))
    assert RunDirectory.resolve(pattern, other, rules=ONLINE.resume_rules).path != folder
