"""Reusing the keys/values of the previous turn changes nothing but the work done."""

from __future__ import annotations

from pathlib import Path

import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import SamplingParams


def make_model(path: Path, prefix_caching: bool) -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(1)
    # float32 on any device: the cached and the fresh prefill differ by rounding, which
    # bf16 (the CUDA default) makes larger than the comparison's tolerance
    model = HuggingfaceLoRALanguageModel(str(path), prefix_caching=prefix_caching,
                                         dtype="float32",
                                         lora_config=LoRASettings(r=4, lora_alpha=8))
    with torch.no_grad():  # a non-zero adapter, so that the cached keys include it
        for name, parameter in model.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05)
    return model


def test_second_turn_from_cached_prefixes_equals_a_full_prefill(tiny_model_path: Path) -> None:
    cached, fresh = make_model(tiny_model_path, True), make_model(tiny_model_path, False)
    tokenize = cached.tokenizer
    prompts = [tokenize(text, add_special_tokens=False)["input_ids"]
               for text in ("Hello there, how are you today?", "Two", "A somewhat longer "
                            "first message that makes the rows differ in length")]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=7)
    first = cached.generate(prompts, greedy)
    assert len(cached._sampler.prefix_cache) == len(prompts)
    observation = tokenize(" Observation: try again.", add_special_tokens=False)["input_ids"]
    second_prompts = [prompt + group[0].token_ids + observation
                      for prompt, group in zip(prompts, first, strict=True)]
    second_prompts.append(tokenize("A new episode", add_special_tokens=False)["input_ids"])
    assert all(cached._sampler.prefix_cache.longest_prefix(p) for p in second_prompts[:3])

    with_cache = cached.generate(second_prompts, greedy)
    without = fresh.generate(second_prompts, greedy)
    for one, two in zip(with_cache, without, strict=True):
        assert one[0].token_ids == two[0].token_ids
        assert torch.allclose(torch.tensor(one[0].logprobs), torch.tensor(two[0].logprobs),
                              atol=1e-4)


def test_cache_is_dropped_when_the_weights_change(tiny_model_path: Path) -> None:
    model = make_model(tiny_model_path, True)
    prompt = model.tokenizer("Hello", add_special_tokens=False)["input_ids"]
    model.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=3))
    assert len(model._sampler.prefix_cache) == 1
    model.train_mode()
    assert len(model._sampler.prefix_cache) == 0
    model.eval_mode()
    model.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=3))
    model.mark_updated()
    assert len(model._sampler.prefix_cache) == 0
