"""Micro-batch budgets: `auto` keeps the CPU's 512 tokens and, on a GPU, sizes a
micro-batch from the memory left and the policy's estimate of a token's activations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    decoder_activation_bytes,
)
from src.training.micro_batches import CPU_TOKEN_BUDGET, MEMORY_SHARE, automatic_token_budget


def test_auto_is_the_cpu_budget_on_a_cpu(tiny_model_path: Path) -> None:
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path), device="cpu")
    assert automatic_token_budget(model) == CPU_TOKEN_BUDGET


def test_the_activation_estimate_at_the_7b_shape() -> None:
    """20 x hidden + 8 x intermediate bf16 elements a layer, the head's 10 bytes a vocabulary
    entry: 14.0 MB a token at Qwen2.5-7B's shape (15 MB measured on a GPU); with gradient
    checkpointing a layer's input a layer and one whole layer."""
    config = Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                         num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4)
    layer = (20 * 3584 + 8 * 18944) * 2
    assert decoder_activation_bytes(config, 2, False) == 28 * layer + 152064 * 10
    assert 13.9e6 < decoder_activation_bytes(config, 2, False) < 14.1e6
    assert decoder_activation_bytes(config, 2, True) == 28 * 3584 * 2 + layer + 152064 * 10


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU")
def test_auto_fills_a_share_of_the_free_memory_on_cuda(tiny_model_path: Path) -> None:
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path), device="cuda")
    budget = automatic_token_budget(model)
    free, _ = torch.cuda.mem_get_info()
    available = free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    expected = int(MEMORY_SHARE * available / model.activation_bytes_per_token())
    assert budget == max(CPU_TOKEN_BUDGET, expected)
    assert budget > CPU_TOKEN_BUDGET  # a tiny model on a GPU: far more than a CPU's
