"""Micro-batch budgets: `auto` keeps the CPU's 512 tokens and, on a GPU, sizes a
micro-batch from the memory left and the policy's estimate of a token's activations,
once per run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, Qwen2Config

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    decoder_activation_bytes,
)
from src.training.learner import Learner
from src.training.micro_batches import CPU_TOKEN_BUDGET, MEMORY_SHARE, automatic_token_budget
from src.training.settings import OptimizerSettings


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


def test_no_estimate_for_a_config_without_the_sizes() -> None:
    assert decoder_activation_bytes(GPT2Config(), 2, False) is None


def test_auto_is_resolved_once_and_carried_by_a_checkpoint(tiny_model_path: Path,
                                                            tmp_path: Path) -> None:
    """A learner keeps the budget it resolved; its checkpoint carries it to the resumed
    run, which uses it whatever its own memory says; a number in the settings wins."""
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path), device="cpu")
    learner = Learner(model, OptimizerSettings())
    assert learner.token_budget() == CPU_TOKEN_BUDGET
    learner.fix_token_budget(300)  # as if this run's GPU had room for 300 tokens
    learner.save(tmp_path, {})
    resumed = Learner(model, OptimizerSettings())
    resumed.restore(tmp_path)
    assert resumed.token_budget() == 300
    fixed = Learner(model, OptimizerSettings(micro_batch_max_tokens=64))
    fixed.restore(tmp_path)
    assert fixed.token_budget() == 64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU")
def test_auto_fills_a_share_of_the_free_memory_on_cuda(tiny_model_path: Path) -> None:
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path), device="cuda")
    budget = automatic_token_budget(model)
    free, _ = torch.cuda.mem_get_info()
    available = free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    expected = int(MEMORY_SHARE * available / model.activation_bytes_per_token())
    assert budget == max(CPU_TOKEN_BUDGET, expected)
    assert budget > CPU_TOKEN_BUDGET  # a tiny model on a GPU: far more than a CPU's
