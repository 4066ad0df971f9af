"""The static-cache sampler on the tiny random Llama, on the CPU (its decode steps run
eagerly there; CUDA replays them as graphs, tests/runtime and bench/gpu_check.sh run it
on a GPU): it samples what the KV-cache sampler samples from the same seed, records the
policy's own log-probs, ends rows at their stop ids, and carries a turn's keys and values
to the next."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, Qwen2Config

from src.language_models.huggingface.static_cache_sampler import (
    LENGTH_BUCKET,
    StaticCacheSampler,
    row_bucket,
)
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
)
from src.language_models.language_model import SamplingParams
from tests.language_models.policy_samples import (
    largest_logprob_difference,
    prompts_of,
    trained_looking_policy,
)


def policy(path: Path, sampler: str, **parameters) -> HuggingfaceLoRALanguageModel:
    return trained_looking_policy(path, dtype="float32", sampler=sampler, **parameters)


def test_models_with_sliding_windows_keep_the_kv_cache_sampler(tiny_model_path: Path,
                                                               tmp_path: Path) -> None:
    """The static cache's own mask would let a sliding-window layer see its whole context:
    such configs are refused by name, and `auto` would not choose the sampler for them."""
    assert StaticCacheSampler.covers(Qwen2Config(use_sliding_window=False))
    assert not StaticCacheSampler.covers(Qwen2Config(use_sliding_window=True,
                                                     max_window_layers=0))
    windowed = tmp_path / "windowed"
    shutil.copytree(tiny_model_path, windowed)
    config = json.loads((windowed / "config.json").read_text())
    (windowed / "config.json").write_text(json.dumps({**config, "sliding_window": 8}))
    assert StaticCacheSampler.covers(AutoConfig.from_pretrained(tiny_model_path))
    assert not StaticCacheSampler.covers(AutoConfig.from_pretrained(windowed))
    with pytest.raises(ValueError, match="sliding-window"):
        HuggingfaceLoRALanguageModel(str(windowed), device="cpu", sampler="static_cache")


def test_row_buckets() -> None:
    assert [row_bucket(n) for n in (1, 2, 3, 5, 16, 17, 33, 64)] == [1, 2, 4, 8, 16, 32, 48,
                                                                     64]


@pytest.mark.parametrize("params", [SamplingParams(n=3, max_new_tokens=20),
                                    SamplingParams(n=2, temperature=0.7, top_p=0.8,
                                                   max_new_tokens=12)])
@pytest.mark.parametrize("attention", ["auto", "eager"])  # eager: an additive mask
def test_samples_what_the_kv_cache_sampler_samples(tiny_model_path: Path,
                                                   params: SamplingParams,
                                                   attention: str) -> None:
    """Same seed, same draws: identical tokens and finish reasons, log-probs equal to
    rounding (the static cache attends over its whole buffer, masked)."""
    static, dynamic = (policy(tiny_model_path, name, attn_implementation=attention)
                       for name in ("static_cache", "kv_cache"))
    assert isinstance(static._sampler, StaticCacheSampler)
    prompts = prompts_of(static)
    ours, theirs = static.generate(prompts, params, seed=4), dynamic.generate(prompts, params,
                                                                               seed=4)
    for mine, other in zip((g for group in ours for g in group),
                           (g for group in theirs for g in group), strict=True):
        assert mine.token_ids == other.token_ids
        assert mine.finish_reason == other.finish_reason
        assert torch.allclose(torch.tensor(mine.logprobs), torch.tensor(other.logprobs),
                              atol=1e-5)
    if params.top_p == 1.0:  # (a nucleus's log-probs are of the renormalised nucleus)
        assert largest_logprob_difference(static, prompts, ours, params.temperature) < 1e-4
    assert len({tuple(g.token_ids) for group in ours for g in group}) > 1


def test_rows_end_at_their_stop_ids(tiny_model_path: Path) -> None:
    """A stop id cuts each row after its first occurrence; the rows that stop early and
    those that run to the limit are told apart."""
    model = policy(tiny_model_path, "static_cache")
    prompts = prompts_of(model)
    free = model.generate(prompts, SamplingParams(n=2, max_new_tokens=24), seed=9)
    stop = free[0][0].token_ids[5]  # a token the first row samples
    stopped = model.generate(prompts, SamplingParams(n=2, max_new_tokens=24,
                                                     stop_token_ids=[stop]), seed=9)
    for before, after in zip((g for group in free for g in group),
                             (g for group in stopped for g in group), strict=True):
        if stop in before.token_ids:
            end = before.token_ids.index(stop) + 1
            assert (after.token_ids, after.finish_reason) == (before.token_ids[:end], "stop")
            assert after.logprobs == before.logprobs[:end]
        else:
            assert (after.token_ids, after.finish_reason) == (before.token_ids, "length")
    assert stopped[0][0].finish_reason == "stop"


def test_second_turn_from_the_prefix_cache_matches_a_fresh_prefill(
        tiny_model_path: Path) -> None:
    """A turn's kept keys and values give the next turn the log-probs a policy without
    the cache gives it."""
    cached = policy(tiny_model_path, "static_cache")
    fresh = policy(tiny_model_path, "static_cache", prefix_caching=False)
    prompts = prompts_of(cached)
    first = cached.generate(prompts, SamplingParams(max_new_tokens=10), seed=1)
    assert len(cached._sampler.prefix_cache) == len(prompts)
    second = [prompt + group[0].token_ids + cached.tokenizer.encode(" and then")
              for prompt, group in zip(prompts, first, strict=True)]
    params = SamplingParams(max_new_tokens=10)
    reused, recomputed = cached.generate(second, params, seed=2), fresh.generate(second, params,
                                                                                 seed=2)
    for mine, other in zip(reused, recomputed, strict=True):
        assert mine[0].token_ids == other[0].token_ids
        assert torch.allclose(torch.tensor(mine[0].logprobs), torch.tensor(other[0].logprobs),
                              atol=1e-5)


def test_buffers_are_bucketed_and_dropped_when_the_weights_change(
        tiny_model_path: Path) -> None:
    model = policy(tiny_model_path, "static_cache")
    prompts = prompts_of(model)
    model.generate(prompts, SamplingParams(n=2, max_new_tokens=8), seed=1)
    model.generate(prompts[:2], SamplingParams(n=3, max_new_tokens=8), seed=1)
    assert list(model._sampler._states) == [(8, LENGTH_BUCKET)]  # 6 rows, padded to 8
    model.train_mode()
    assert not model._sampler._states


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU")
def test_replayed_graphs_decode_what_eager_steps_decode_on_cuda(tiny_model_path: Path) -> None:
    """A replayed graph runs the kernels its capture recorded: the same tokens and the same
    log-prob bits as the same steps run eagerly, over a second call and a new bucket."""
    model = trained_looking_policy(tiny_model_path, device="cuda", dtype="bfloat16",
                                   sampler="static_cache")
    prompts = prompts_of(model)
    params = SamplingParams(n=4, max_new_tokens=40)
    sampler = model._sampler
    assert isinstance(sampler, StaticCacheSampler) and sampler.capture_graphs
    replayed = [model.generate(prompts, params, seed=seed) for seed in (1, 2)]
    replayed.append(model.generate(prompts[:1], params, seed=3))
    assert sum(state.graph is not None for state in sampler._states.values()) == 2
    sampler.capture_graphs = False
    sampler.weights_changed()
    eager = [model.generate(prompts, params, seed=seed) for seed in (1, 2)]
    eager.append(model.generate(prompts[:1], params, seed=3))
    assert replayed == eager
