"""Which weights a run loads: a policy that nothing in the process samples from or scores
with (a rollout pool samples for the agent, trainer workers score and update) is planned
without its base weights; any other keeps them, and a config cannot ask otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.run.assembly import ExperimentPlan, load_experiment_config, plan_experiment
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
          workers: int = 2, policy: str = "") -> ExperimentPlan:
    path = tmp_path / "assignment.yaml"
    path.write_text(ASSIGNMENT.format(output=tmp_path / "run", sampler=sampler,
                                      verify_sync=str(verify_sync).lower(), workers=workers,
                                      policy=policy))
    return plan_experiment(*load_experiment_config(path))


def _base_weights(plan: ExperimentPlan) -> str:
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
    assert _base_weights(plan_experiment(*load_experiment_config(path))) == "meta"
