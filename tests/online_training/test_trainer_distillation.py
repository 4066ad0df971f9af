"""The RL callback with a distillation teacher on the tiny random Llama: what it learns
from and skips, what it refuses, and a run from a config that logs the reverse KL,
resumes to the same adapter and evaluates its checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from src.configuration.errors import ConfigError
from src.evaluate import main as evaluate_main
from src.online_training.plan import load_online_config, plan_online_training
from src.online_training.trainer import RLTrainer
from src.run.trainer import BatchContext, TrainingSchedule
from src.training.distillation import REVERSE_KL
from src.training.settings import (
    AdvantageSettings,
    DistillationSettings,
    MismatchSettings,
    PPOSettings,
    TrainerWorkerSettings,
)
from tests.online_training.test_trainer import make_model, perturb_adapter, sampled_episodes
from tests.run_folders import kill_after_commits, run_command


def distilled_update(tiny_model_path: Path, teacher_differs: bool) -> dict[str, float]:
    """The first update's metrics of a pure distillation trainer whose groups' task
    rewards are all equal (no task signal): two epochs, the student's log-probs scored
    by the trainer before the first."""
    student, teacher = make_model(tiny_model_path), make_model(tiny_model_path)
    if teacher_differs:
        perturb_adapter(teacher)
    callback = RLTrainer(student, teacher=teacher, ppo=PPOSettings(epochs=2),
                                  mismatch=MismatchSettings(old_logprobs="trainer"))
    callback.prepare(TrainingSchedule(1, episodes_per_batch=4))
    episodes = sampled_episodes(student, [[1.0, 1.0], [0.0, 0.0]])
    return callback.train(BatchContext(0, episodes, 2))


def test_a_teacher_s_grades_are_something_to_learn_and_a_twin_s_are_not(
        tiny_model_path: Path) -> None:
    differing = distilled_update(tiny_model_path, teacher_differs=True)
    assert differing["update_skipped"] == 0.0 and differing["grad_norm"] > 0
    assert differing[REVERSE_KL] != 0.0 and differing["frac_reward_zero_std"] == 1.0
    # the teacher has the student's weights: every token's advantage is exactly 0, and
    # both steps go without a forward, as for a batch of equal rewards without a teacher
    twin = distilled_update(tiny_model_path, teacher_differs=False)
    assert twin[REVERSE_KL] == 0.0 and twin["distillation/advantage_abs_mean"] == 0.0
    assert twin["update_skipped"] == 2.0 and twin["grad_norm"] == 0.0


@pytest.mark.parametrize(("settings", "key", "message"), [
    ({"trainer_workers": TrainerWorkerSettings(count=2)}, "trainer_workers.count",
     "not in trainer workers"),
    ({"advantage": AdvantageSettings(zero_std_groups="drop")}, "advantage.zero_std_groups",
     "grades their tokens too"),
])
def test_what_a_teacher_does_not_go_with_is_refused_naming_the_setting(
        tiny_model_path: Path, settings: dict[str, object], key: str, message: str) -> None:
    student, teacher = make_model(tiny_model_path), make_model(tiny_model_path)
    with pytest.raises(ConfigError, match=message) as error:
        RLTrainer(student, teacher=teacher, **settings)  # type: ignore[arg-type]
    assert error.value.key == key


def test_distillation_settings_need_a_teacher_other_than_the_student(
        tiny_model_path: Path) -> None:
    student = make_model(tiny_model_path)
    with pytest.raises(ConfigError, match="no teacher"):
        RLTrainer(student, distillation=DistillationSettings())
    with pytest.raises(ConfigError, match="the trained model itself"):
        RLTrainer(student, teacher=student)


ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 5
  rollout: {{batch_size: 2, group_size: 2, max_batches: 3}}
  evaluation: {{at_start: false, at_end: true, max_samples: 2, temperature: 1.0,
                splits: [validation]}}
  task:
    name: math_problems
    parameters: {{num_train: 6, num_validation: 2, max_round: 1}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model
      parameters: &tiny
        model_name_or_path: {model}
        dtype: float32
        lora_config: {{r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj]}}
    - name: teacher
      module: src.language_models.instance.huggingface_lora_language_model
      parameters:
        <<: *tiny
        adapter_path: {teacher_adapter}
{extra_models}\
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, temperature: 1.0, max_new_tokens: 6}}
  callback_dict:
    rl_training:
      name: rl_training
      parameters:
        language_model: policy
        teacher: {teacher}
        distillation: {{weight: 1.0, reward_weight: 0.5}}
        optimizer: {{learning_rate: 5e-2}}
"""


def write_config(folder: Path, tiny_model_path: Path, teacher_adapter: Path,
                 teacher: str = "teacher", extra_models: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config_file.yaml"
    config.write_text(ASSIGNMENT.format(
        output=folder / "run", model=tiny_model_path,
        teacher_adapter=teacher_adapter, teacher=teacher, extra_models=extra_models))
    return config


@pytest.fixture(scope="module")
def teacher_adapter(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained teacher's stand-in: an adapter on the tiny model's base that changes its
    outputs."""
    model = make_model(tiny_model_path)
    perturb_adapter(model)
    folder = tmp_path_factory.mktemp("teacher") / "lora_weights"
    model.save_adapter(folder)
    return folder


def test_a_teacher_name_not_in_the_run_is_a_config_error_naming_the_known_ones(
        tiny_model_path: Path, teacher_adapter: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, tiny_model_path, teacher_adapter, teacher="tutor")
    with pytest.raises(ConfigError, match=r"'tutor', which is not in language_model_list "
                                          r"\(have: policy, teacher\)") as error:
        plan_online_training(*load_online_config(config))
    assert error.value.key == "assignment_config.callback_dict.rl_training.parameters.teacher"


def test_a_teacher_that_cannot_score_is_a_config_error(
        tiny_model_path: Path, teacher_adapter: Path, tmp_path: Path) -> None:
    pool = ("    - name: pool\n"
            "      module: src.language_models.rollout_pool.pool.RolloutPool\n"
            "      parameters: {trainer: policy}\n")
    config = write_config(tmp_path, tiny_model_path, teacher_adapter, teacher="pool",
                          extra_models=pool)
    with pytest.raises(ConfigError, match="'pool', a RolloutPool, but RLTrainer's "
                                          "teacher must be a TrainableLanguageModel"):
        plan_online_training(*load_online_config(config))


def final_adapter(run: Path) -> dict[str, torch.Tensor]:
    state = json.loads((run / "run_state.json").read_text())
    assert state["finished"]
    folder = (run / "callback_state" / "rl_training"
              / f"checkpoint-{state['completed_batches']:06d}" / "lora_weights")
    return load_file(folder / "adapter_model.safetensors")


def trained_metrics(run: Path) -> list[dict[str, float]]:
    """Each batch's training figures (not its timings, nor the evaluation's)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().split("\n") if line.strip()]
    return [{key: value for key, value in row.items() if not key.startswith("time/")}
            for row in rows if REVERSE_KL in row]


def test_a_run_with_a_teacher_logs_the_reverse_kl_resumes_and_evaluates(
        tiny_model_path: Path, teacher_adapter: Path, tmp_path: Path) -> None:
    straight = write_config(tmp_path / "straight", tiny_model_path, teacher_adapter)
    assert run_command(straight) == 0
    # the same run killed after its first batch, then resumed: the teacher is built again
    # from its own adapter_path, nothing of it is in the checkpoints
    resumed = write_config(tmp_path / "resumed", tiny_model_path, teacher_adapter)
    kill_after_commits(resumed, tmp_path / "resumed" / "run", commits=1)
    assert run_command(resumed) == 0

    expected, got = final_adapter(tmp_path / "straight" / "run"), final_adapter(
        tmp_path / "resumed" / "run")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[name], got[name]) for name in expected)
    assert any(tensor.abs().max() > 0 for name, tensor in expected.items() if "lora_B" in name)
    metrics = trained_metrics(tmp_path / "straight" / "run")
    assert len(metrics) == 3 and all(row[REVERSE_KL] != 0.0 for row in metrics)
    assert metrics == trained_metrics(tmp_path / "resumed" / "run")
    checkpoint = tmp_path / "straight" / "run" / "callback_state" / "rl_training"
    assert not any("teacher" in path.name for path in checkpoint.rglob("*"))

    # the run's checkpoints are the student's: evaluate picks it, not the teacher
    assert evaluate_main([str(tmp_path / "straight" / "run"), "--checkpoint", "latest",
                          "--target_dir", str(tmp_path / "evaluated")]) == 0
    evaluated = (tmp_path / "evaluated" / "evaluation" / "step-000003.jsonl").read_text()
    assert evaluated == (tmp_path / "straight" / "run" / "evaluation"
                         / "step-000003.jsonl").read_text()
