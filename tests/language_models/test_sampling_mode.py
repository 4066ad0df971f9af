"""Sampling never sees LoRA dropout, whatever mode the caller left the model in."""

from __future__ import annotations

from pathlib import Path

import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import SamplingParams


def test_generate_turns_dropout_off_and_restores_the_mode(tiny_model_path: Path) -> None:
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path), prefix_caching=False,
                                         lora_config=LoRASettings(r=4, lora_dropout=0.9))
    with torch.no_grad():
        for name, parameter in model.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.5)
    prompt = model.tokenizer("Some text to continue", add_special_tokens=False)["input_ids"]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    expected = model.generate([prompt], params)[0][0]
    model.train_mode()
    for seed in range(3):
        torch.manual_seed(seed)  # dropout masks would differ from seed to seed
        got = model.generate([prompt], params)[0][0]
        assert got.token_ids == expected.token_ids
        assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(expected.logprobs))
    assert model.model.training
