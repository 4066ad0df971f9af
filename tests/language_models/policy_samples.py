"""The Hugging Face policy with a trained-looking adapter, and how far the log-probs its
sampler recorded are from the policy's own scores of the same tokens."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import Generation, TokenBatch


def trained_looking_policy(path: Path, **parameters: Any) -> HuggingfaceLoRALanguageModel:
    """The policy (on CPU unless `device` says otherwise) with a non-zero adapter, the
    same one for the same parameters."""
    torch.manual_seed(5)
    parameters.setdefault("lora_config", LoRASettings(r=4, lora_alpha=8))
    parameters.setdefault("device", "cpu")
    model = HuggingfaceLoRALanguageModel(str(path), **parameters)
    with torch.no_grad():
        for name, parameter in model.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05)
    return model


def prompts_of(model: HuggingfaceLoRALanguageModel) -> list[list[int]]:
    """Three prompts of the samplers' tests."""
    encode = model.tokenizer.encode  # of different lengths: the batch is left-padded
    return [encode("The colour of the sky is"), encode("Two plus two makes four, and three"),
            encode("Hi")]


def largest_logprob_difference(model: HuggingfaceLoRALanguageModel,
                               prompts: Sequence[list[int]],
                               generations: Sequence[Sequence[Generation]],
                               temperature: float = 1.0) -> float:
    """The largest |recorded - scored| over every sampled token, each completion scored
    after its prompt at `temperature`."""
    sequences, masks, recorded = [], [], []
    for prompt, samples in zip(prompts, generations, strict=True):
        for generation in samples:
            sequences.append(prompt + generation.token_ids)
            masks.append([0] * len(prompt) + [1] * len(generation.token_ids))
            recorded.append((len(prompt), generation.logprobs))
    scored = model.score(TokenBatch.from_sequences(sequences, masks, model.pad_id),
                         temperature=temperature).logprobs
    return max(abs(scored[row, start + t].item() - value)
               for row, (start, values) in enumerate(recorded) for t, value in enumerate(values))
