"""The rollout pool on a real local Ray cluster with Hugging Face engines (a tiny random
Llama): sampling spread over actors, adapter sync by version, staleness, actor failure."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import SamplingParams
from src.language_models.rollout_pool.pool import EngineFailure, RolloutPool

ray = pytest.importorskip("ray")


@pytest.fixture
def trainer(tiny_model_path: Path) -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(0)
    return HuggingfaceLoRALanguageModel(
        model_name_or_path=str(tiny_model_path),
        lora_config=LoRASettings(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))


def _update(trainer: HuggingfaceLoRALanguageModel) -> None:
    """What an optimiser step does, as far as the pool can tell."""
    with torch.no_grad():
        for parameter in trainer.trainable_parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    trainer.mark_updated()


def _prompts(trainer: HuggingfaceLoRALanguageModel, count: int) -> list[list[int]]:
    return [trainer.tokenizer.encode(f"Question {i}: what is {i} + {i}?") for i in range(count)]


def test_pool_samples_with_the_trainers_adapter_and_version(ray_cluster, trainer):
    with RolloutPool(trainer, engine="hf", num_engines=2) as pool:
        prompts = _prompts(trainer, 5)
        params = SamplingParams(n=2, max_new_tokens=6)
        first = pool.generate(prompts, params)
        assert [len(samples) for samples in first] == [2] * 5
        assert {g.policy_version for samples in first for g in samples} == {0}
        assert pool.drain_metrics()["rollout_pool/sync_logprob_max_diff"] < 1e-5

        _update(trainer)
        second = pool.generate(prompts, params)
        assert {g.policy_version for samples in second for g in samples} == {1}
        metrics = pool.drain_metrics()
        assert metrics["rollout_pool/served_version"] == 1.0
        assert metrics["rollout_pool/sync_logprob_max_diff"] < 1e-5
        # the engines sample from the updated adapter: their log-probs are the trainer's
        for prompt, samples in zip(prompts, second, strict=True):
            sequence = prompt + samples[0].token_ids
            expected = trainer.sequence_logprobs([sequence])[0][len(prompt):]
            assert max(abs(a - b) for a, b in zip(expected, samples[0].logprobs,
                                                  strict=True)) < 1e-4
        # a seed fixes the draws of every engine
        assert [[g.token_ids for g in s] for s in pool.generate(prompts, params, seed=3)] == \
            [[g.token_ids for g in s] for s in pool.generate(prompts, params, seed=3)]


def test_staleness_bound_delays_sync(ray_cluster, trainer):
    with RolloutPool(trainer, engine="hf", num_engines=1, max_staleness=1,
                     verify_sync=False) as pool:
        prompt = _prompts(trainer, 1)
        params = SamplingParams(max_new_tokens=2)
        assert pool.generate(prompt, params)[0][0].policy_version == 0
        _update(trainer)  # one behind: allowed
        assert pool.generate(prompt, params)[0][0].policy_version == 0
        _update(trainer)  # two behind: synced
        assert pool.generate(prompt, params)[0][0].policy_version == 2


def test_killed_actor_mid_batch_is_replaced_and_nothing_is_lost(ray_cluster, trainer):
    with RolloutPool(trainer, engine="hf", num_engines=2, verify_sync=False) as pool:
        prompts = _prompts(trainer, 8)
        params = SamplingParams(n=2, max_new_tokens=200)
        torch.manual_seed(7)
        started = time.perf_counter()
        expected = pool.generate(prompts, params)
        duration = time.perf_counter() - started

        victim = pool.engine_pids()[0]
        killer = threading.Timer(duration / 3, os.kill, (victim, signal.SIGKILL))
        killer.start()
        torch.manual_seed(7)
        again = pool.generate(prompts, params)
        killer.join()
        assert pool.drain_metrics()["rollout_pool/engine_restarts"] == 1.0
        assert victim not in pool.engine_pids()
        # the replacement got the adapter and the same seed: the same samples come back
        assert [[g.token_ids for g in s] for s in again] == \
            [[g.token_ids for g in s] for s in expected]


def test_hung_engine_times_out_with_a_clear_error(ray_cluster, trainer):
    with (RolloutPool(trainer, engine="hf", num_engines=1, verify_sync=False,
                      request_timeout_s=0.2, max_restarts=0) as pool,
          pytest.raises(EngineFailure, match="request_timeout_s=0.2")):
        pool.generate(_prompts(trainer, 4), SamplingParams(n=4, max_new_tokens=400))


def test_a_later_turn_goes_back_to_the_engine_that_holds_its_prefix(ray_cluster, trainer):
    with RolloutPool(trainer, engine="hf", num_engines=2, verify_sync=False) as pool:
        prompts = _prompts(trainer, 4)
        first = pool.generate(prompts, SamplingParams(max_new_tokens=4))
        owners = {i: pool._router.engine_for((*prompts[i], *first[i][0].token_ids)) for i in range(4)}
        follow_ups = [prompts[i] + first[i][0].token_ids + [11, 12] for i in reversed(range(4))]
        shares = pool._router.assign(follow_ups)
        for engine, indices in enumerate(shares):
            assert all(owners[3 - index] == engine for index in indices)


def test_colocation_needs_the_trainer_on_a_gpu(trainer):
    # refused before any actor starts: a CPU trainer has no GPU to share
    with pytest.raises(ValueError, match="trainer's GPU, but the trainer is on cpu"):
        RolloutPool(trainer, engine="hf", num_engines=1, gpus_per_engine=1,
                    colocate_with_trainer=True)
