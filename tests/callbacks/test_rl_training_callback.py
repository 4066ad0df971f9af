"""The RL callback on a tiny random Llama: what it logs, saves and how it splits work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from src.callbacks.callback import BatchContext
from src.callbacks.instance.rl_training_callback import RLTrainingCallback
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import SamplingParams
from src.records.episode import Episode, EpisodeStatus, Outcome, Sample
from src.records.trajectory import Trajectory

TRL_METRICS = {"reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
               "clip_ratio/low_mean", "clip_ratio/high_mean", "completions/mean_length",
               "completions/clipped_ratio", "grad_norm", "learning_rate", "loss"}


def make_model(path: Path) -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(1)  # LoRA A is drawn at construction
    return HuggingfaceLoRALanguageModel(str(path), lora_config=LoRASettings(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))


def sampled_episodes(model: HuggingfaceLoRALanguageModel, rewards: list[list[float]],
                     max_new_tokens: int = 12) -> list[Episode]:
    """Episodes with real sampled trajectories: one group per row of `rewards`."""
    torch.manual_seed(2)
    prompts = [model.tokenizer(f"Question {index}: ", add_special_tokens=False)["input_ids"]
               for index in range(len(rewards))]
    params = SamplingParams(n=len(rewards[0]), temperature=1.0, max_new_tokens=max_new_tokens)
    episodes = []
    for index, (prompt, group) in enumerate(zip(prompts, model.generate(prompts, params),
                                                strict=True)):
        for slot, generation in enumerate(group):
            trajectory = Trajectory()
            trajectory.append_context(prompt)
            trajectory.append_sampled(generation.token_ids, generation.logprobs,
                                      generation.finish_reason, generation.policy_version)
            episode = Episode(Sample(sample_id=f"s{index}"), slot, 0, task=None)  # type: ignore[arg-type]
            episode.trajectory, episode.reward = trajectory, rewards[index][slot]
            episode.status = EpisodeStatus.COMPLETED
            episode.outcome = Outcome.CORRECT if episode.reward > 0 else Outcome.INCORRECT
            episodes.append(episode)
    return episodes


def adapter(model: HuggingfaceLoRALanguageModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.model.named_parameters()
            if p.requires_grad}


def test_splitting_into_micro_batches_gives_the_same_update(tiny_model_path: Path) -> None:
    results = []
    for budget in (None, 16):  # one micro-batch, or rows of ~12-20 tokens one by one
        model = make_model(tiny_model_path)
        episodes = sampled_episodes(model, [[1.0, 0.0, 0.5], [0.0, 0.2, 1.0]])
        callback = RLTrainingCallback(model, learning_rate=1e-2, kl_coef=0.1,
                                      entropy_coeff=0.01, micro_batch_max_tokens=budget)
        callback.on_run_start(1)
        rows = list(range(len(episodes)))
        tokens = callback._token_batch(episodes)
        assert len(callback._micro_batches(rows, tokens)) == (1 if budget is None else 6)
        callback.on_batch_end(BatchContext(0, episodes, 3))
        results.append(adapter(model))
    whole, split = results
    assert max((whole[k] - split[k]).abs().max().item() for k in whole) <= 1e-6
    assert any(v.abs().max() > 0 for k, v in whole.items() if "lora_B" in k)


def test_metrics_carry_trl_names(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    episodes = sampled_episodes(model, [[1.0, 0.0], [0.5, 0.5]])
    callback = RLTrainingCallback(model, kl_coef=0.05)
    callback.on_run_start(1)
    metrics = callback.on_batch_end(BatchContext(0, episodes, 2))
    assert set(metrics) >= TRL_METRICS
    assert metrics["reward"] == pytest.approx(0.5)
    assert metrics["frac_reward_zero_std"] == pytest.approx(0.5)  # the [0.5, 0.5] group
    assert metrics["logprob_diff/sampler_trainer"] < 1e-3  # same weights sampled and scored
    assert metrics["policy_version"] == 1.0 and model.policy_version == 1


def test_outcome_rewards_map_statuses(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    callback = RLTrainingCallback(model, reward_from="outcome", reward_correct=1.0,
                                  reward_incorrect=-0.1, reward_timeout=-0.3)
    correct, wrong, timeout = sampled_episodes(model, [[1.0, 0.0, 0.0]])
    timeout.status = EpisodeStatus.TASK_LIMIT_REACHED
    assert [callback.episode_return(e) for e in (correct, wrong, timeout)] == [1.0, -0.1, -0.3]


def test_best_checkpoint_follows_the_metric(tiny_model_path: Path, tmp_path: Path) -> None:
    model = make_model(tiny_model_path)
    callback = RLTrainingCallback(model, learning_rate=1e-2, best_metric="reward")
    callback.on_run_start(3)
    state = tmp_path / "callback_state" / "rl"
    for step, rewards in enumerate([[[0.0, 1.0]], [[1.0, 1.0]], [[0.0, 0.0]]], start=1):
        callback.on_batch_end(BatchContext(step - 1, sampled_episodes(model, rewards), 2))
        folder = state / f"checkpoint-{step:06d}"
        folder.mkdir(parents=True)
        callback.save_state(folder)
    best = json.loads((state / "best" / "best.json").read_text())
    assert best == {"metric": "reward", "value": 1.0, "step": 2}
    saved = (state / "best" / "lora_weights" / "adapter_model.safetensors").read_bytes()
    assert saved == (state / "checkpoint-000002" / "lora_weights" /
                     "adapter_model.safetensors").read_bytes()


def test_cosine_schedule_counts_mini_batches_and_epochs(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    callback = RLTrainingCallback(model, learning_rate=1e-3, lr_schedule="cosine",
                                  warmup_ratio=0.0, ppo_epochs=2, mini_batch_size=2)
    callback.on_run_start(3, episodes_per_batch=4)  # 3 batches x 2 epochs x 2 mini-batches
    learning_rates = []
    for batch in range(3):
        callback.on_batch_end(BatchContext(batch, sampled_episodes(model, [[0.0, 1.0, 0.5, 1.0]]),
                                           4))
        learning_rates.append(callback.optimizer.param_groups[0]["lr"])
    assert callback.step == 12
    assert learning_rates[1] > 0  # half-way through, not already at the end
    assert learning_rates[2] == pytest.approx(0.0, abs=1e-12)


def test_samples_older_than_the_staleness_bound_are_dropped(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path)
    callback = RLTrainingCallback(model, learning_rate=1e-3, max_policy_staleness=0)
    callback.on_run_start(2)
    episodes = sampled_episodes(model, [[0.0, 1.0], [1.0, 0.0]])  # sampled at version 0
    model.mark_updated()  # the trainer moved on before this batch's update
    metrics = callback.on_batch_end(BatchContext(0, episodes, 2))
    assert metrics["policy_staleness/max"] == 1.0
    assert metrics["policy_staleness/dropped"] == 4.0
    assert metrics["skipped_batches"] == 1.0
