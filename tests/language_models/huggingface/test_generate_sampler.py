"""The generate sampler (transformers' `model.generate`) on the tiny random Llama: each
token's recorded log-prob is the policy's own score of it at the sampling temperature,
SamplingParams alone decide how tokens are drawn and where rows end, and a config can
choose it."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig

from src.configuration.errors import ConfigError
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
)
from src.language_models.language_model import SamplingParams, TokenBatch
from tests.configuration.test_config_errors import VALID, plan, write
from tests.language_models.policy_samples import (
    largest_logprob_difference,
    prompts_of,
    trained_looking_policy,
)


def policy(path: Path, **parameters) -> HuggingfaceLoRALanguageModel:
    return trained_looking_policy(path, dtype="float32", sampler="generate", **parameters)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.6])
def test_recorded_logprobs_are_the_policys_scores_at_the_temperature(
        tiny_model_path: Path, temperature: float) -> None:
    model = policy(tiny_model_path)
    prompts = prompts_of(model)
    params = SamplingParams(n=2, temperature=temperature, max_new_tokens=12)
    generations = model.generate(prompts, params, seed=3)
    assert largest_logprob_difference(model, prompts, generations, temperature) < 1e-4
    # at the plain temperature 1 the same tokens score differently: the test can tell
    if temperature != 1.0:
        assert largest_logprob_difference(model, prompts, generations, 1.0) > 1e-2
    assert len({tuple(g.token_ids) for samples in generations for g in samples}) > 1


def test_top_p_logprobs_are_of_the_renormalised_nucleus(tiny_model_path: Path) -> None:
    """Each recorded log-prob exceeds the full distribution's by -log(the nucleus' mass),
    which lies between 0 and -log(top_p)."""
    model = policy(tiny_model_path)
    prompts = prompts_of(model)
    top_p = 0.8
    generations = model.generate(prompts, SamplingParams(top_p=top_p, max_new_tokens=12),
                                 seed=3)
    sequences = [prompt + samples[0].token_ids for prompt, samples in zip(prompts, generations,
                                                                          strict=True)]
    masks = [[0] * len(prompt) + [1] * len(samples[0].token_ids)
             for prompt, samples in zip(prompts, generations, strict=True)]
    scored = model.score(TokenBatch.from_sequences(sequences, masks, model.pad_id)).logprobs
    gaps = torch.tensor([value - scored[row, len(prompts[row]) + t].item()
                         for row, samples in enumerate(generations)
                         for t, value in enumerate(samples[0].logprobs)])
    assert float(gaps.min()) > -1e-5
    assert float(gaps.max()) < -math.log(top_p) + 1e-5
    assert float(gaps.max()) > 1e-3  # the nucleus did leave tokens out


def test_greedy_agrees_with_the_kv_cache_sampler(tiny_model_path: Path) -> None:
    ours = policy(tiny_model_path)
    theirs = trained_looking_policy(tiny_model_path, dtype="float32", sampler="kv_cache")
    prompts = prompts_of(ours)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    for mine, other in zip(ours.generate(prompts, greedy), theirs.generate(prompts, greedy),
                           strict=True):
        assert mine[0].token_ids == other[0].token_ids
        assert torch.allclose(torch.tensor(mine[0].logprobs), torch.tensor(other[0].logprobs),
                              atol=1e-5)


def test_a_stop_token_ends_its_row_and_max_new_tokens_the_others(tiny_model_path: Path
                                                                 ) -> None:
    model = policy(tiny_model_path)
    prompts = prompts_of(model)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    unstopped = [samples[0] for samples in model.generate(prompts, greedy)]
    assert all(len(g.token_ids) == 8 and g.finish_reason == "length" for g in unstopped)
    stop = unstopped[0].token_ids[3]
    stopped = model.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=8,
                                                     stop_token_ids=(stop,)))
    for before, [after] in zip(unstopped, stopped, strict=True):
        if stop in before.token_ids:  # cut after the stop token, which is kept
            end = before.token_ids.index(stop) + 1
            assert (after.token_ids, after.finish_reason) == (before.token_ids[:end], "stop")
            assert after.logprobs == pytest.approx(before.logprobs[:end], abs=1e-5)
        else:  # rows that stopped earlier do not end this one
            assert (after.token_ids, after.finish_reason) == (before.token_ids, "length")
    assert stopped[0][0].finish_reason == "stop"
    assert any(samples[0].finish_reason == "length" for samples in stopped)


def test_the_models_generation_config_adds_no_processing(tiny_model_path: Path,
                                                         tmp_path: Path) -> None:
    """A generation_config.json with its own top-k, repetition penalty and min-p (as
    Qwen's ships) would change the distribution tokens are drawn from."""
    folder = shutil.copytree(tiny_model_path, tmp_path / "model")
    configured = GenerationConfig.from_pretrained(folder)
    configured.update(top_k=2, repetition_penalty=1.5, min_p=0.3, do_sample=True)
    configured.save_pretrained(folder)
    model = policy(folder)
    prompts = prompts_of(model)
    generations = model.generate(prompts, SamplingParams(n=2, max_new_tokens=12), seed=3)
    assert largest_logprob_difference(model, prompts, generations) < 1e-4


def test_a_seed_repeats_the_samples(tiny_model_path: Path) -> None:
    model = policy(tiny_model_path)
    prompts = prompts_of(model)
    params = SamplingParams(n=2, max_new_tokens=8)

    def tokens(seed: int) -> list[list[list[int]]]:
        return [[g.token_ids for g in samples]
                for samples in model.generate(prompts, params, seed=seed)]

    assert tokens(11) == tokens(11)
    assert tokens(11) != tokens(12)


# the policy and an agent that samples from it, in place of the oracle agent
POLICY_AND_AGENT = """\
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters: {{sampler: {sampler}}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy}}
"""


def test_a_config_chooses_the_sampler(tmp_path: Path) -> None:
    def planned(sampler: str):
        text = VALID.format(output=tmp_path / "out").replace(
            "  agent:\n    name: oracle_agent\n", POLICY_AND_AGENT.format(sampler=sampler))
        return plan(write(tmp_path, text))

    chosen = planned("generate").language_models["policy"]
    assert chosen.parameters["sampler"] == "generate"
    with pytest.raises(ConfigError, match=r"parameters\.sampler"):
        planned("beam_search")
