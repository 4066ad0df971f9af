"""The example assignment (`configs/assignments/rl_training_example.yaml`) runs as its guide
writes it, and the shapes it uses (module files, nested components, `random_seed`, an
implied language model) each work and fail with a clear message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from src.configuration.errors import ConfigError
from src.online_training.plan import load_online_config, plan_online_training
from src.run_experiment import main
from src.tasks.instance.db_bench.single_skill_task_generator import SingleSkillTaskGenerator
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill, DBBenchSplits

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT_ROOT / "configs" / "assignments" / "rl_training_example.yaml"


def plan(path: Path):
    config, source = load_online_config(path)
    return plan_online_training(config, source)


def example_with(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    change(data["assignment_config"])
    path = tmp_path / "assignment.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_module_files_nested_generator_and_implied_language_model_plan() -> None:
    result = plan(EXAMPLE)
    assert result.task.cls is DBBenchSingleSkill
    generator = result.task.parameters["single_skill_task_generator"]
    assert generator.cls is SingleSkillTaskGenerator
    assert result.trainers["rl_training"].parameters["language_model"] == "llama_lora"


def test_the_example_trains_two_batches(tmp_path: Path, tiny_model_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def shorten(assignment: dict) -> None:  # only where it runs, what model, how long
        assignment["output_dir"] = str(tmp_path / "run")
        assignment["rollout"]["max_batches"] = 2
        assignment["evaluation"]["at_end"] = False
        assignment["language_model_list"][0]["parameters"]["model_name_or_path"] = str(
            tiny_model_path)

    monkeypatch.chdir(PROJECT_ROOT)  # the data path is relative to the project, as shipped
    assert main(["--config_path", str(example_with(tmp_path, shorten)), "--no_progress"]) == 0
    episodes = [json.loads(line) for line in (tmp_path / "run" / "runs.jsonl").open()]
    assert len(episodes) == 8
    assert {episode["batch_index"] for episode in episodes} == {0, 1}
    skills = set(SingleSkillTaskGenerator(
        skill_to_tasks_path="examples/lifelong_agent_bench/single_skill_tasks.json"
    ).get_available_skills())
    assert {episode["category"] for episode in episodes} <= skills
    checkpoints = tmp_path / "run" / "callback_state" / "rl_training"
    assert (checkpoints / "checkpoint-000002" / "lora_weights").is_dir()


def test_a_module_with_several_fitting_classes_lists_them(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "two_agents.py").write_text(
        "from src.agents.instance.oracle_agent import OracleAgent\n"
        "class First(OracleAgent): pass\n"
        "class Second(OracleAgent): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = example_with(tmp_path, lambda a: a["agent"].update(module="two_agents",
                                                              parameters={}))
    with pytest.raises(ConfigError, match=r"agent\.module.*several Agent classes "
                                          r"\(First, Second\).*two_agents\.<Class>"):
        plan(path)


def test_a_module_without_a_fitting_class_says_so(tmp_path: Path) -> None:
    path = example_with(tmp_path, lambda a: a["task"].update(
        module="src.tasks.instance.db_bench.sandbox"))
    with pytest.raises(ConfigError, match=r"task\.module.*defines no Task class"):
        plan(path)


def test_a_missing_module_names_what_is_missing(tmp_path: Path) -> None:
    path = example_with(tmp_path, lambda a: a["task"].update(
        module="src.tasks.instance.no_such_module.Task"))
    with pytest.raises(ConfigError, match=r"No module named 'src\.tasks\.instance\.no_such"):
        plan(path)


def test_nested_component_parameters_are_checked(tmp_path: Path) -> None:
    def misspell(assignment: dict) -> None:
        assignment["task"]["parameters"]["single_skill_task_generator"]["parameters"] = {
            "skill_to_task_path": "x.json"}

    with pytest.raises(ConfigError, match=r"single_skill_task_generator\.parameters\."
                                          r"skill_to_task_path.*Extra inputs"):
        plan(example_with(tmp_path, misspell))


def test_an_implied_language_model_must_be_the_only_fitting_one(tmp_path: Path) -> None:
    def two_models(assignment: dict) -> None:
        second = dict(assignment["language_model_list"][0], name="second")
        assignment["language_model_list"].append(second)

    with pytest.raises(ConfigError, match=r"rl_training\.parameters\.language_model.*2 "
                                          r"language models.*llama_lora, second.*name one"):
        plan(example_with(tmp_path, two_models))


def test_seed_and_random_seed_must_agree() -> None:
    assert DBBenchSingleSkill(random_seed=7).splits.seed == 7
    assert DBBenchSingleSkill().splits.seed == 0
    with pytest.raises(ValueError, match="seed 1 and random_seed 2 differ"):
        DBBenchSingleSkill(splits=DBBenchSplits(seed=1), random_seed=2)


@pytest.mark.parametrize("module", [".relative", "src..tasks"])
def test_a_module_path_that_is_no_path_is_a_config_error(tmp_path: Path, module: str) -> None:
    path = example_with(tmp_path, lambda a: a["task"].update(module=module))
    with pytest.raises(ConfigError, match=r"task\.(module|name)"):
        plan(path)
