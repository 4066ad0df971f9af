"""On-policy distillation's grading on a tiny random Llama: the teacher scores exactly the
student's sampled ids (multi-turn, packed, micro-batched), only agent tokens get an
advantage, and its sign and size are the formula's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from src.configuration.errors import ConfigError
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
)
from src.language_models.language_model import SamplingParams
from src.online_training.trainer import RLTrainer
from src.online_training.trajectory_rows import token_rows
from src.records.trajectory import Trajectory
from src.training.distillation import REVERSE_KL, Graded, check_same_tokenizer
from src.training.learner import Learner
from src.training.settings import DistillationSettings, OptimizerSettings
from src.training.token_rows import TokenRows
from tests.online_training.test_trainer import make_model, perturb_adapter

TEMPERATURE = 0.8


def multi_turn_trajectories(model: HuggingfaceLoRALanguageModel) -> list[Trajectory]:
    """Two groups of two episodes, each of two agent replies with an observation between
    them, sampled by `model`: rows of a group share their prompt (packed together)."""
    torch.manual_seed(3)
    tokenize = model.tokenizer
    params = SamplingParams(n=2, temperature=TEMPERATURE, max_new_tokens=6)
    prompts = [tokenize(f"Question {index}: ", add_special_tokens=False)["input_ids"]
               for index in range(2)]
    observation = tokenize(" The tool says 42. ", add_special_tokens=False)["input_ids"]
    trajectories = []
    for prompt, group in zip(prompts, model.generate(prompts, params), strict=True):
        for first in group:
            trajectory = Trajectory()
            trajectory.append_context(prompt)
            trajectory.append_sampled(first.token_ids, first.logprobs, first.finish_reason,
                                      0, TEMPERATURE, 1.0, 6)
            trajectory.append_context(observation)
            [[second]] = model.generate([trajectory.token_ids],
                                        SamplingParams(temperature=TEMPERATURE, max_new_tokens=6))
            trajectory.append_sampled(second.token_ids, second.logprobs, second.finish_reason,
                                      0, TEMPERATURE, 1.0, 6)
            trajectories.append(trajectory)
    return trajectories


def graded_rows(callback: RLTrainer, trajectories: list[Trajectory],
                task_advantages: torch.Tensor | None = None) -> tuple[TokenRows, Graded]:
    """The rows the trainer builds for these trajectories, graded as its update grades
    them (task advantages 0 unless given)."""
    rows, _ = token_rows(trajectories, callback.model, callback.ppo.mask_truncated_completions)
    rows.advantages = (torch.zeros(len(trajectories)) if task_advantages is None
                       else task_advantages.clone())
    assert callback.teacher is not None and isinstance(callback.learner, Learner)
    return rows, callback.teacher.grade(callback.learner, rows, TEMPERATURE)


@pytest.fixture
def student(tiny_model_path: Path) -> HuggingfaceLoRALanguageModel:
    return make_model(tiny_model_path)


@pytest.fixture
def teacher(tiny_model_path: Path) -> HuggingfaceLoRALanguageModel:
    model = make_model(tiny_model_path)
    perturb_adapter(model)  # e.g. a trained adapter on the same base
    return model


def test_the_teacher_scores_exactly_the_student_s_sampled_ids(
        student: HuggingfaceLoRALanguageModel, teacher: HuggingfaceLoRALanguageModel) -> None:
    trajectories = multi_turn_trajectories(student)
    # a micro-batch a group: its two rows packed, their shared prompt scored once
    callback = RLTrainer(student, teacher=teacher,
                                  optimizer=OptimizerSettings(micro_batch_max_tokens=50))
    rows, graded = graded_rows(callback, trajectories)
    assert teacher.packs_shared_prefixes
    assert sorted(map(sorted, callback.learner.micro_batches(rows, range(4), teacher))) == [
        [0, 1], [2, 3]]
    mask = rows.batch.loss_mask
    for row, trajectory in enumerate(trajectories):
        alone = teacher.sequence_logprobs([trajectory.token_ids], temperature=TEMPERATURE)[0]
        agent = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
        used = graded.teacher_logprobs[row, : len(alone)]
        assert torch.allclose(used[agent], torch.tensor(alone)[agent], atol=1e-6, rtol=0)
        # the rows' mask is the episode's: two replies, an observation between them
        assert mask[row, : len(alone)].tolist() == trajectory.loss_mask
        assert "".join(map(str, trajectory.loss_mask)).strip("0").count("10") == 1
    assert rows.token_advantages is not None
    assert bool((rows.token_advantages[mask == 0] == 0).all())
    assert bool((rows.token_advantages[mask > 0] != 0).any())


def test_a_teacher_with_the_student_s_weights_gives_no_advantage(
        student: HuggingfaceLoRALanguageModel, tiny_model_path: Path) -> None:
    twin = make_model(tiny_model_path)  # the same seed: the same weights
    callback = RLTrainer(student, teacher=twin)
    rows, graded = graded_rows(callback, multi_turn_trajectories(student))
    # the student's log-prob is the sampler's: equal to the teacher's up to the sampler's
    # arithmetic
    assert abs(graded.metrics[REVERSE_KL]) < 1e-5
    assert rows.token_advantages is not None
    assert rows.token_advantages.abs().max().item() < 1e-5
    # scored by the trainer (the student's "old" from a scoring pass, as with
    # mismatch.old_logprobs trainer): exactly 0
    rows.old_logprobs = callback.learner.score(rows, temperature=TEMPERATURE)
    assert callback.teacher is not None and isinstance(callback.learner, Learner)
    assert callback.teacher.grade(callback.learner, rows, TEMPERATURE).metrics[REVERSE_KL] == 0
    assert bool((rows.token_advantages == 0).all())


def test_the_advantage_has_the_formula_s_sign_on_a_hand_checked_token(
        student: HuggingfaceLoRALanguageModel, teacher: HuggingfaceLoRALanguageModel) -> None:
    trajectories = multi_turn_trajectories(student)
    settings = DistillationSettings(weight=0.5, reward_weight=2.0)
    task = torch.tensor([1.0, -1.0, 0.5, -0.5])
    callback = RLTrainer(student, teacher=teacher, distillation=settings)
    rows, graded = graded_rows(callback, trajectories, task)
    assert rows.token_advantages is not None
    ids = trajectories[0].token_ids
    student_says = torch.tensor(trajectories[0].sampling_logprobs)
    teacher_says = torch.tensor(teacher.sequence_logprobs([ids], temperature=TEMPERATURE)[0])
    agent = torch.tensor(trajectories[0].loss_mask, dtype=torch.bool)
    gap = torch.where(agent, teacher_says - student_says, torch.zeros_like(student_says))
    for token in (int(gap.argmax()), int(gap.argmin())):  # the teacher's most and least liked
        expected = 0.5 * (teacher_says[token] - student_says[token]).item()
        advantage = rows.token_advantages[0, token].item()
        assert advantage == pytest.approx(expected, abs=1e-6)
        assert (advantage > 0) == (teacher_says[token] > student_says[token])
        # the task's advantage is mixed in at reward_weight
        assert rows.per_token_advantages()[0, token].item() == pytest.approx(
            2.0 * 1.0 + expected, abs=1e-6)
    assert gap.max() > 0 > gap.min()  # the teacher differs both ways: both signs checked
    agent_tokens = int(rows.batch.loss_mask.sum())
    assert graded.metrics[REVERSE_KL] == pytest.approx(
        -rows.token_advantages.sum().item() / 0.5 / agent_tokens, abs=1e-6)


def test_a_teacher_with_another_tokenizer_is_a_config_error(
        student: HuggingfaceLoRALanguageModel, tiny_model_path: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-tokenizer"
    for item in tiny_model_path.iterdir():
        (other / item.name).parent.mkdir(exist_ok=True)
        (other / item.name).write_bytes(item.read_bytes())
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["<only-the-teacher-has-it>"])
    tokenizer.save_pretrained(other)
    teacher = HuggingfaceLoRALanguageModel(str(other), dtype="float32")
    with pytest.raises(ConfigError, match="tokenize differently") as error:
        check_same_tokenizer(student, teacher)
    assert str(other) in str(error.value) and str(tiny_model_path) in str(error.value)
    assert "<only-the-teacher-has-it>" in str(error.value)
    with pytest.raises(ConfigError, match="tokenize differently"):
        RLTrainer(student, teacher=teacher)
    check_same_tokenizer(student, make_model(tiny_model_path))  # a second load is the same
