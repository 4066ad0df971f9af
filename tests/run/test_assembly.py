"""Which weights a run loads: a policy that nothing in the process samples from or scores
with (a rollout pool samples for the agent, trainer workers score and update) is planned
without its base weights; any other keeps them, and a config cannot ask otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from src.configuration.errors import ConfigError
from src.online_training.plan import OnlineTrainingPlan, load_online_config, plan_online_training
from src.records.episode import Sample
from src.tasks.task import Task, TaskSettingError, unknown_name
from tests.conftest import PROJECT_ROOT

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 2, group_size: 2}}
  task:
    name: math_problems
    parameters: {{num_train: 4, num_validation: 2}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters: {{{policy}}}
    - name: rollout_pool
      module: src.language_models.rollout_pool.pool.RolloutPool
      parameters: {{trainer: policy, engine: hf, verify_sync: {verify_sync}}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: {sampler}}}
  callback_dict:
    rl:
      name: rl_training
      parameters: {{language_model: policy, num_trainer_workers: {workers}}}
"""


def _plan(tmp_path: Path, sampler: str = "rollout_pool", verify_sync: bool = False,
          workers: int = 2, policy: str = "") -> OnlineTrainingPlan:
    path = tmp_path / "assignment.yaml"
    path.write_text(ASSIGNMENT.format(output=tmp_path / "run", sampler=sampler,
                                      verify_sync=str(verify_sync).lower(), workers=workers,
                                      policy=policy))
    return plan_online_training(*load_online_config(path))


def _base_weights(plan: OnlineTrainingPlan) -> str:
    return plan.language_models["policy"].parameters["base_weights"]


def test_a_policy_only_handed_to_a_pool_and_trainer_workers_loads_no_base_weights(
        tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert _base_weights(plan) == "meta"
    assert "base_weights meta" in plan.describe()  # what --dry_run prints


@pytest.mark.parametrize(("change", "why"), [
    ({"sampler": "policy"}, "the agent samples from it"),
    ({"verify_sync": True}, "the pool probes its engines against it"),
    ({"workers": 1}, "the update scores it in this process"),
    ({"policy": "base_weights: load"}, "the config says so"),
])
def test_a_policy_keeps_its_base_weights_where_this_process_runs_it(
        tmp_path: Path, change: dict[str, object], why: str) -> None:
    assert _base_weights(_plan(tmp_path, **change)) == "load", why  # type: ignore[arg-type]


def test_a_policy_asked_to_go_without_base_weights_where_it_samples_is_refused(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agent.parameters.language_model samples from or "
                                          "scores with 'policy'") as error:
        _plan(tmp_path, sampler="policy", policy="base_weights: meta")
    assert "language_model_list.0.parameters.base_weights" in str(error.value)


def test_the_32b_recipe_drives_its_workers_without_base_weights() -> None:
    path = PROJECT_ROOT / "configs" / "assignments" / "math_qwen3_32b_vllm_tp4.yaml"
    assert _base_weights(plan_online_training(*load_online_config(path))) == "meta"


GAMES = ("GuessTheNumber-v0", "TicTacToe-v0")


class NamedGameTask(Task[Any]):
    """A task whose settings name a game and its arguments, checked as an adapter's are
    (without building anything)."""

    def __init__(self, game: str = GAMES[0], game_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        if parameters["game"] not in GAMES:
            raise TaskSettingError(("game",), unknown_name("game", parameters["game"], GAMES))
        for key in parameters["game_kwargs"] or {}:
            if key != "max_digits":
                raise TaskSettingError(("game_kwargs", key),
                                       unknown_name("argument", key, ["max_digits"]))

    def sample_ids(self, split: str = "train") -> list[str]:
        return []

    def _get_sample(self, sample_id: str) -> Sample:
        raise KeyError(sample_id)

    def new_episode(self) -> Any:
        raise NotImplementedError("never built: its settings are refused")


NAMED_GAME = f"""\
assignment_config:
  output_dir: {{output}}
  task:
    module: {__name__}.NamedGameTask
    name: game
    parameters:
      game: {{game}}
      game_kwargs:
        {{argument}}: 3
  agent:
    name: oracle_agent
"""


@pytest.mark.parametrize(("game", "argument", "line", "key", "problem"), [
    ("GuessTheNumbr-v0", "max_digits", 7, "game",
     "unknown game 'GuessTheNumbr-v0'; did you mean 'GuessTheNumber-v0'?"),
    ("TicTacToe-v0", "max_digit", 9, "game_kwargs.max_digit",
     "unknown argument 'max_digit'; did you mean 'max_digits'?"),
])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_task_setting_its_environment_lacks_is_a_config_error_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], game: str, argument: str,
        line: int, key: str, problem: str, dry_run: bool) -> None:
    from src.run_experiment import main

    path = tmp_path / "assignment.yaml"
    path.write_text(NAMED_GAME.format(output=tmp_path / "run", game=game, argument=argument))
    assert main(["--config_path", str(path), *(["--dry_run"] if dry_run else [])]) == 2
    assert capsys.readouterr().err == (
        f"config error: {path}:{line}, key 'assignment_config.task.parameters.{key}': "
        f"{problem}\n")
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


@pytest.mark.parametrize(("old", "new", "line", "key", "problem"), [
    ("dataset: chain_sum", "dataset: basic_arithmatic", 18, "dataset",
     "unknown reasoning-gym dataset 'basic_arithmatic'; did you mean 'basic_arithmetic'"),
    ("max_digits: 1}", "max_digit: 1}", 19, "config.max_digit",
     "unknown parameter of reasoning-gym's 'chain_sum' 'max_digit'; did you mean "
     "'max_digits'"),
])
def test_a_misspelt_reasoning_gym_setting_fails_the_dry_run_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, line: int,
        key: str, problem: str) -> None:
    pytest.importorskip("reasoning_gym", reason="the reasoning-gym adapter's package")
    from src.run_experiment import main

    recipe = PROJECT_ROOT / "configs" / "assignments" / "reasoning_gym_grpo.yaml"
    path = tmp_path / "reasoning_gym.yaml"
    path.write_text(recipe.read_text().replace(old, new))
    assert main(["--config_path", str(path), "--dry_run"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"config error: {path}:{line}, key "
                            f"'assignment_config.task.parameters.{key}': {problem}"), error
