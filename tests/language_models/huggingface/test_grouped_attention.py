"""Grouped-query attention without copying heads gives transformers' sdpa results."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from src.language_models.huggingface.grouped_attention import GROUPED_SDPA


def test_grouped_sdpa_equals_sdpa_with_padding_and_gradients(tiny_model_path: Path) -> None:
    ids = torch.randint(100, 40000, (3, 24))
    mask = torch.ones(3, 24, dtype=torch.long)
    mask[0, :5] = 0  # left padding: transformers passes a mask, and sdpa repeats heads
    results = {}
    for implementation in ("sdpa", GROUPED_SDPA):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                     attn_implementation=implementation)
        assert model.model.layers[0].self_attn.num_key_value_groups == 2
        model.train()
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits[mask.bool()].logsumexp(-1).sum().backward()
        results[implementation] = (logits.detach()[mask.bool()],
                                   model.model.layers[1].self_attn.q_proj.weight.grad)
    (logits_sdpa, grad_sdpa), (logits_grouped, grad_grouped) = results.values()
    assert torch.allclose(logits_sdpa, logits_grouped, atol=1e-5)
    assert torch.allclose(grad_sdpa, grad_grouped, atol=1e-5, rtol=1e-4)


def test_one_query_decode_equals_sdpa_with_a_padding_mask(tiny_model_path: Path) -> None:
    ids = torch.randint(100, 40000, (3, 17))
    mask = torch.ones(3, 17, dtype=torch.long)
    mask[1, :4] = 0
    logits = {}
    for implementation in ("sdpa", GROUPED_SDPA):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                     attn_implementation=implementation)
        with torch.no_grad():
            prefill = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], use_cache=True)
            step = model(input_ids=ids[:, -1:], attention_mask=mask,
                         past_key_values=prefill.past_key_values, use_cache=True)
        logits[implementation] = step.logits[:, -1]
    assert torch.allclose(logits["sdpa"], logits[GROUPED_SDPA], atol=1e-5)
