"""The RL callback on a tiny random Llama: what it logs, saves and how it splits work."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from src.configuration.models import TrackersConfig
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import SamplingParams
from src.online_training.trainer import RLTrainer
from src.online_training.trajectory_rows import token_rows
from src.records.episode import Episode, EpisodeStatus, Outcome, Sample
from src.records.trajectory import Trajectory
from src.run.folder import RunDirectory
from src.run.metrics import MetricsLog
from src.run.protocol import Part, RunProtocol
from src.run.trainer import BatchContext, TrainingSchedule
from src.storage.checkpoint_store import CheckpointStore
from src.training.settings import (
    AdvantageSettings,
    KLSettings,
    MismatchSettings,
    OptimizerSettings,
    PPOSettings,
    RewardSettings,
    TrainerWorkerSettings,
)

TRL_METRICS = {"reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
               "clip_ratio/low_mean", "clip_ratio/high_mean", "completions/mean_length",
               "completions/clipped_ratio", "grad_norm", "learning_rate", "loss"}


def make_model(path: Path) -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(1)  # LoRA A is drawn at construction
    # float32 on any device: the comparisons here are of exact arithmetic (a split batch,
    # a resumed run), which bf16 (the CUDA default) rounds past their tolerances
    return HuggingfaceLoRALanguageModel(str(path), dtype="float32", lora_config=LoRASettings(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))


def sampled_episodes(model: HuggingfaceLoRALanguageModel, rewards: list[list[float]],
                     max_new_tokens: int = 12, temperature: float = 1.0,
                     top_p: float = 1.0) -> list[Episode]:
    """Episodes with real sampled trajectories: one group per row of `rewards`."""
    torch.manual_seed(2)
    prompts = [model.tokenizer(f"Question {index}: ", add_special_tokens=False)["input_ids"]
               for index in range(len(rewards))]
    params = SamplingParams(n=len(rewards[0]), temperature=temperature, top_p=top_p,
                            max_new_tokens=max_new_tokens)
    episodes = []
    for index, (prompt, group) in enumerate(zip(prompts, model.generate(prompts, params),
                                                strict=True)):
        for slot, generation in enumerate(group):
            trajectory = Trajectory()
            trajectory.append_context(prompt)
            trajectory.append_sampled(generation.token_ids, generation.logprobs,
                                      generation.finish_reason, generation.policy_version,
                                      temperature, top_p, max_new_tokens)
            episode = Episode(Sample(sample_id=f"s{index}"), slot, 0, environment=None)  # type: ignore[arg-type]
            episode.trajectory, episode.reward = trajectory, rewards[index][slot]
            episode.status = EpisodeStatus.COMPLETED
            episode.outcome = Outcome.CORRECT if episode.reward > 0 else Outcome.INCORRECT
            episodes.append(episode)
    return episodes


def first_update(model: HuggingfaceLoRALanguageModel, episodes: list[Episode], group_size: int,
                 **settings: Any) -> dict[str, float]:
    """The metrics of a fresh callback's first batch."""
    callback = RLTrainer(model, **settings)
    callback.prepare(TrainingSchedule(1, episodes_per_batch=4))
    return callback.train(BatchContext(0, episodes, group_size))


def adapter(model: HuggingfaceLoRALanguageModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.model.named_parameters()
            if p.requires_grad}


def test_splitting_into_micro_batches_gives_the_same_update(tiny_model_path: Path) -> None:
    results = []
    for budget in (None, 16):  # one micro-batch, or rows of ~12-20 tokens one by one
        model = make_model(tiny_model_path)
        episodes = sampled_episodes(model, [[1.0, 0.0, 0.5], [0.0, 0.2, 1.0]])
        callback = RLTrainer(
            model, kl=KLSettings(coef=0.1), ppo=PPOSettings(entropy_coeff=0.01),
            optimizer=OptimizerSettings(learning_rate=1e-2, micro_batch_max_tokens=budget))
        callback.prepare(TrainingSchedule(1, episodes_per_batch=4))
        rows, _ = token_rows([episode.trajectory for episode in episodes], callback.model,
                            callback.ppo.mask_truncated_completions)
        micro_batches = callback.learner.micro_batches(rows, range(len(episodes)))
        assert len(micro_batches) == (1 if budget is None else 6)
        callback.train(BatchContext(0, episodes, 3))
        results.append(adapter(model))
    whole, split = results
    assert max((whole[k] - split[k]).abs().max().item() for k in whole) <= 1e-6
    assert any(v.abs().max() > 0 for k, v in whole.items() if "lora_B" in k)


def test_metrics_carry_trl_names(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0], [0.5, 0.5]])
    metrics = first_update(model, episodes, 2, kl=KLSettings(coef=0.05))
    assert set(metrics) >= TRL_METRICS
    assert metrics["reward"] == pytest.approx(0.5)
    # TRL's reward_std: the mean over groups of each group's std ([1, 0] and [0.5, 0.5])
    assert metrics["reward_std"] == pytest.approx(math.sqrt(0.5) / 2)
    assert metrics["reward_std/batch"] == pytest.approx(torch.tensor([1.0, 0, 0.5, 0.5]).std().item())
    assert metrics["frac_reward_zero_std"] == pytest.approx(0.5)  # the [0.5, 0.5] group
    assert metrics["logprob_diff/sampler_trainer"] < 1e-3  # same weights sampled and scored
    assert metrics["policy_version"] == 1.0 and model.policy_version == 1


def test_a_batch_of_equal_returns_steps_without_scoring_and_says_so(
        tiny_model_path: Path) -> None:
    """Every group's returns equal: every advantage 0, so the learner steps on zero
    gradients without a forward; the figures only a forward measures are left out."""
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 1.0], [0.5, 0.5]])
    metrics = first_update(model, episodes, 2, optimizer=OptimizerSettings(weight_decay=0.1))
    assert metrics["update_skipped"] == 1.0 and metrics["grad_norm"] == 0.0
    assert not {"loss", "entropy", "clip_ratio/low_mean", "logprob_diff/sampler_trainer"
                } & set(metrics)
    assert metrics["policy_version"] == 1.0  # the step happened (weight decay moved A)
    scored = first_update(make_model(tiny_model_path),
                          sampled_episodes(model, [[1.0, 0.0], [0.5, 0.5]]), 2)
    assert scored["update_skipped"] == 0.0 and "loss" in scored


def test_the_return_is_the_task_s_reward_times_the_weight(tiny_model_path: Path) -> None:
    """Outcome rewards (DB-bench's reward_correct, ...) are the task's; the trainer does
    not shape them again."""
    model = make_model(tiny_model_path)
    callback = RLTrainer(model, reward=RewardSettings(weight=2.0))
    correct, wrong, timeout = sampled_episodes(model, [[1.0, -0.1, -0.3]])
    timeout.status = EpisodeStatus.TASK_LIMIT_REACHED
    assert [callback.episode_return(e) for e in (correct, wrong, timeout)] == [2.0, -0.2, -0.6]


def test_outcome_reward_settings_name_the_task_s(tiny_model_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\['correct', 'source'\].*task's own.*reward_correct"):
        RewardSettings.model_validate({"source": "outcome", "correct": 2.0})


def _protocol(folder: Path, callback: RLTrainer) -> RunProtocol:
    """The run protocol the loop commits each batch through, with the callback's store."""
    folder.mkdir()
    store = CheckpointStore(folder / "callback_state" / "rl")
    return RunProtocol(RunDirectory(folder), MetricsLog(folder, TrackersConfig(tensorboard=False)),
                       [Part(store, callback, callback.best_rule)])


def test_best_checkpoint_follows_the_metric(tiny_model_path: Path, tmp_path: Path) -> None:
    model = make_model(tiny_model_path)
    callback = RLTrainer(model, optimizer=OptimizerSettings(learning_rate=1e-2),
                                  best_metric="reward")
    callback.prepare(TrainingSchedule(3, episodes_per_batch=4))
    protocol = _protocol(tmp_path / "run", callback)
    state = tmp_path / "run" / "callback_state" / "rl"
    for step, rewards in enumerate([[[0.0, 1.0]], [[1.0, 1.0]], [[0.0, 0.0]]], start=1):
        metrics = callback.train(BatchContext(step - 1, sampled_episodes(model, rewards), 2))
        protocol.commit(step, metrics)  # what the loop does with the batch's figures
    best = json.loads((state / "best" / "best.json").read_text())
    assert best == {"step": 2, "metric": "reward", "value": 1.0}
    saved = (state / "best" / "lora_weights" / "adapter_model.safetensors").read_bytes()
    assert saved == (state / "checkpoint-000002" / "lora_weights" /
                     "adapter_model.safetensors").read_bytes()


def test_best_checkpoint_can_follow_a_held_out_figure(tiny_model_path: Path,
                                                     tmp_path: Path) -> None:
    """best_metric naming an evaluation figure: only evaluated steps compete, and best/
    names the batch (its checkpoint) even after a batch that made no optimiser step."""
    model = make_model(tiny_model_path)
    callback = RLTrainer(model, optimizer=OptimizerSettings(learning_rate=1e-2),
                                  best_metric="selection/success_rate")
    callback.prepare(TrainingSchedule(4, episodes_per_batch=4))
    protocol = _protocol(tmp_path / "run", callback)
    state = tmp_path / "run" / "callback_state" / "rl"
    evaluations = {1: 0.25, 2: None, 3: 0.5, 4: 0.5}  # ties keep the earlier step
    for step, figure in evaluations.items():
        # batch 2: every group dropped (dynamic sampling), nothing to train on
        episodes = [] if step == 2 else sampled_episodes(model, [[0.0, 1.0]])
        figures = callback.train(BatchContext(step - 1, episodes, 2))
        if figure is not None:
            figures |= {"selection/success_rate": figure, "eval/success_rate": 1.0 - figure}
        protocol.commit(step, figures)
        if step > 1:  # (the first is pruned by the fourth: 3 kept)
            assert (state / f"checkpoint-{step:06d}" / "best.json").exists() == (step == 3)
    best = json.loads((state / "best" / "best.json").read_text())
    assert best == {"step": 3, "metric": "selection/success_rate", "value": 0.5}
    assert callback.learner.step == 3  # optimiser steps: batches 1, 3 and 4


def test_cosine_schedule_counts_mini_batches_and_epochs(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    callback = RLTrainer(
        model, optimizer=OptimizerSettings(learning_rate=1e-3, lr_schedule="cosine"),
        ppo=PPOSettings(epochs=2, mini_batch_size=2))
    callback.prepare(TrainingSchedule(3, episodes_per_batch=4))  # x 2 epochs x 2 mini-batches
    learning_rates = []
    for batch in range(3):
        callback.train(BatchContext(batch, sampled_episodes(model, [[0.0, 1.0, 0.5, 1.0]]),
                                           4))
        learning_rates.append(callback.learner.optimizer.param_groups[0]["lr"])
    assert callback.learner.step == 12
    assert learning_rates[1] > 0  # half-way through, not already at the end
    assert learning_rates[2] == pytest.approx(0.0, abs=1e-12)


def test_samples_older_than_the_staleness_bound_are_dropped(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    callback = RLTrainer(model, optimizer=OptimizerSettings(learning_rate=1e-3),
                                  max_policy_staleness=0)
    callback.prepare(TrainingSchedule(2, episodes_per_batch=4))
    episodes = sampled_episodes(model, [[0.0, 1.0], [1.0, 0.0]])  # sampled at version 0
    model.mark_updated()  # the trainer moved on before this batch's update
    metrics = callback.train(BatchContext(0, episodes, 2))
    assert metrics["policy_staleness/max"] == 1.0
    assert metrics["policy_staleness/dropped"] == 4.0
    assert metrics["skipped_batches"] == 1.0


def perturb_adapter(model: HuggingfaceLoRALanguageModel, scale: float = 0.5) -> None:
    """Give lora_B non-zero values, so that the adapter (and its dropout) changes outputs."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, parameter in model.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)


def test_trainer_scores_under_the_temperature_the_sampler_used(tiny_model_path: Path) -> None:
    """One temperature, from the trajectories: the callback once had its own (default 1.0),
    and an agent sampling at 0.7 gave first-epoch PPO ratios of 0.4-4.6."""
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0], [0.5, 0.0]], temperature=0.7)
    metrics = first_update(model, episodes, 2)
    assert metrics["logprob_diff/sampler_trainer"] < 1e-3


def test_top_p_below_one_is_refused(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0]], top_p=0.9)
    callback = RLTrainer(model)
    callback.prepare(TrainingSchedule(1, episodes_per_batch=4))
    with pytest.raises(ValueError, match="top_p"):
        callback.train(BatchContext(0, episodes, 2))


def test_lora_dropout_is_off_while_the_update_scores(tiny_model_path: Path) -> None:
    torch.manual_seed(1)
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path), lora_config=LoRASettings(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.5))
    perturb_adapter(model)
    episodes = sampled_episodes(model, [[1.0, 0.0], [0.5, 0.0]])
    metrics = first_update(model, episodes, 2)
    assert metrics["logprob_diff/sampler_trainer"] < 1e-3


def test_dr_grpo_divides_by_the_generation_budget(tiny_model_path: Path) -> None:
    """Dr. GRPO's own aggregation by default (seq-mean-token-sum-norm), which once divided
    by each mini-batch's longest completion."""
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0, 0.0]], max_new_tokens=12)
    for episode in episodes:  # as if the budget had been 20 and the replies stopped at 12
        episode.trajectory.max_new_tokens = 20
    lengths = [episode.trajectory.completion_token_count for episode in episodes]
    metrics = first_update(model, episodes, 3, advantage=AdvantageSettings(estimator="dr_grpo"))
    advantages = torch.tensor([2 / 3, -1 / 3, -1 / 3])
    # at ratio 1 the loss is -sum_i A_i |y_i| / (G * budget)
    expected = -(advantages * torch.tensor(lengths, dtype=torch.float32)).sum() / (3 * 20)
    assert metrics["loss"] == pytest.approx(expected.item(), abs=1e-3)


def test_dr_grpos_constant_is_the_same_whatever_else_is_in_the_batch(
        tiny_model_path: Path) -> None:
    """A long episode in the batch once multiplied every episode's denominator by its
    turns (max_new_tokens x turns of the longest): the constant is the configured budget,
    the same for every batch."""
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0, 0.0]], max_new_tokens=12)
    first = episodes[0].trajectory
    sampled = first.token_ids[first.prompt_token_count:]
    for _ in range(5):  # five more turns of 12 tokens: an observation, then a reply
        first.append_context(sampled[:3])
        first.append_sampled(sampled, [0.0] * len(sampled), "length", 0, max_new_tokens=12)
    lengths = [episode.trajectory.completion_token_count for episode in episodes]
    assert lengths[0] == 6 * lengths[1]
    metrics = first_update(model, episodes, 3, advantage=AdvantageSettings(estimator="dr_grpo"),
                           mismatch=MismatchSettings(old_logprobs="trainer"))
    advantages = torch.tensor([2 / 3, -1 / 3, -1 / 3])
    # at ratio 1 the loss is -sum_i A_i |y_i| / (G * the budget of a reply)
    expected = -(advantages * torch.tensor(lengths, dtype=torch.float32)).sum() / (3 * 12)
    assert expected.abs() > 0.5
    assert metrics["loss"] == pytest.approx(expected.item(), rel=1e-3)


def test_a_row_past_the_models_context_is_cut_to_it_and_trained_as_before(
        tiny_model_path: Path) -> None:
    """An environment's huge last observation (the episode then ended at the context
    limit) once made the update run backward over the whole row, far past the context."""
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0, 0.0]])
    reference = first_update(make_model(tiny_model_path), episodes, 3)
    flooded = episodes[0].trajectory
    flooded.append_context([7] * (model.max_context_tokens * 3))  # after its reply
    metrics = first_update(model, episodes, 3)
    assert metrics["rows/cut_to_context"] == 1.0
    assert metrics["loss"] == pytest.approx(reference["loss"], abs=1e-6)
    assert "rows/cut_to_context" not in reference


def test_kl_in_reward_leaves_groups_with_equal_task_returns_at_zero(tiny_model_path: Path) -> None:
    """An all-correct group once got advantages up to +-1.4 from KL noise alone."""
    model = make_model(tiny_model_path)
    perturb_adapter(model)  # KL to the base model differs between the group's members
    episodes = sampled_episodes(model, [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    metrics = first_update(model, episodes, 3, kl=KLSettings(coef=0.5, in_reward=True))
    assert metrics["reward"] == pytest.approx(4 / 6)  # the task's returns, not penalised
    assert metrics["frac_reward_zero_std"] == pytest.approx(0.5)
    assert metrics["reward/with_kl_penalty"] < metrics["reward"]


def test_clip_settings_are_checked() -> None:
    for bad in ({"dual_clip": 1.0}, {"clip_ratio_low": 1.0}, {"clip_ratio_low": -0.1},
                {"clip_ratio_high": -0.2}):
        with pytest.raises(ValueError, match="clip"):
            PPOSettings(**bad)


def test_each_setting_has_one_spelling() -> None:
    """Settings come in groups; LifelongAgentBench's flat names are translated where a
    config is read (src.online_training.flat_names), not taken here."""
    parameters = inspect.signature(RLTrainer.__init__).parameters
    # self aside: two models by name (language_model, teacher), the groups, best_metric,
    # max_policy_staleness and seed
    assert len(parameters) - 1 <= 13
    assert not {"algorithm", "learning_rate", "reward_weight", "num_trainer_workers"} & set(
        parameters)


def test_trainer_workers_make_the_policy_adapter_only() -> None:
    adapter_only = RLTrainer.adapter_only_models
    assert adapter_only({"trainer_workers": TrainerWorkerSettings(count=2)}) == {
        "language_model"}
    assert adapter_only({"trainer_workers": None}) == frozenset()
    assert adapter_only({}) == frozenset()


def test_kl_reference_can_be_the_adapter_the_run_started_from(tiny_model_path: Path,
                                                               tmp_path: Path) -> None:
    start = make_model(tiny_model_path)
    perturb_adapter(start)  # e.g. an SFT adapter
    start.save_adapter(tmp_path / "sft")
    kls = {}
    for reference in ("base", "initial_adapter"):
        torch.manual_seed(1)
        model = HuggingfaceLoRALanguageModel(
            str(tiny_model_path), adapter_path=str(tmp_path / "sft"),
            lora_config=LoRASettings(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        episodes = sampled_episodes(model, [[1.0, 0.0], [0.5, 0.0]])
        callback = RLTrainer(model, kl=KLSettings(coef=0.1, reference=reference))
        callback.prepare(TrainingSchedule(1, episodes_per_batch=4))
        kls[reference] = callback.train(BatchContext(0, episodes, 2))["kl"]
    assert abs(kls["initial_adapter"]) < 1e-4  # the policy has not moved from its start yet
    assert kls["base"] > 1e-3


def test_mismatch_correction_weights_and_metrics(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0], [0.5, 0.0]])
    generator = torch.Generator().manual_seed(3)
    for episode in episodes:  # a sampler that disagrees with the trainer (bf16, vLLM)
        trajectory = episode.trajectory
        trajectory.sampling_logprobs = [
            value + (float(torch.randn(1, generator=generator)) if mask else 0.0)
            for value, mask in zip(trajectory.sampling_logprobs, trajectory.loss_mask,
                                   strict=True)]
    metrics = first_update(model, episodes, 2, mismatch=MismatchSettings(
        old_logprobs="trainer", correction="tis", threshold=2.0))
    assert {"mismatch/kl", "mismatch/k3", "mismatch/is_ratio_mean", "mismatch/corrected_frac",
            "mismatch/ess"} <= set(metrics)
    assert 0.0 < metrics["mismatch/corrected_frac"] < 1.0
    assert 0.0 < metrics["mismatch/ess"] <= 1.0
    assert metrics["logprob_diff/sampler_trainer"] > 0.3
    with pytest.raises(ValueError, match="old_logprobs: trainer"):
        MismatchSettings(correction="mis")
