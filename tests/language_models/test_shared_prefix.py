"""Shared-prefix packing: the plan, and scores and gradients equal to the plain path."""

from __future__ import annotations

import pytest
import torch

from src.language_models.huggingface.token_scoring import packed_batch
from src.language_models.language_model import TokenBatch
from src.language_models.shared_prefix import Pack, plan_packs, split_pack


def test_rows_sharing_a_prefix_are_packed_and_others_stay_alone() -> None:
    prompt_a, prompt_b = list(range(100, 140)), list(range(200, 230))
    sequences = [prompt_b + [1, 2], prompt_a + [3], prompt_a + [4, 5, 6], [7] * 50,
                 prompt_b + [8]]
    packs = plan_packs(sequences, min_shared=16)
    assert sorted(packs, key=lambda pack: pack.rows) == [
        Pack((0, 4), 30), Pack((1, 2), 40), Pack((3,), 0)]
    lengths = [len(sequence) for sequence in sequences]
    assert Pack((1, 2), 40).length(lengths) == 40 + 1 + 3


def test_a_pack_is_split_to_fit_the_token_budget() -> None:
    lengths = [30, 30, 30, 30]  # 20 shared: each row adds 10
    parts = split_pack(Pack((0, 1, 2, 3), 20), lengths, max_tokens=45)
    assert parts == [Pack((0, 1), 20), Pack((2, 3), 20)]
    assert split_pack(Pack((0, 1), 20), lengths, max_tokens=10) == [Pack((0,), 0),
                                                                     Pack((1,), 0)]


# eager attention adds the mask to the scores: the packs' mask must be additive there
@pytest.fixture(params=["auto", "eager"])
def two_models(tiny_model_path, request):
    from src.language_models.instance.huggingface_lora_language_model import (
        HuggingfaceLoRALanguageModel,
        LoRASettings,
    )

    models = []
    for packed in (False, True):
        torch.manual_seed(3)
        model = HuggingfaceLoRALanguageModel(
            str(tiny_model_path), dtype="float32", device="cpu",
            lora_config=LoRASettings(r=4, lora_alpha=8), shared_prefix_training=packed,
            attn_implementation=request.param)
        with torch.no_grad():  # a non-zero adapter: every LoRA weight gets a gradient
            for name, parameter in model.model.named_parameters():
                if "lora_B" in name:
                    parameter.normal_(0.0, 0.05)
        models.append(model)
    return models


def group_batch() -> TokenBatch:
    """Two groups of three completions of different lengths, prompts 24 and 19 tokens."""
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 4000, (24,), generator=generator).tolist(),
               torch.randint(10, 4000, (19,), generator=generator).tolist()]
    sequences, masks = [], []
    for prompt in prompts:
        for length in (5, 9, 2):
            completion = torch.randint(10, 4000, (length,), generator=generator).tolist()
            sequences.append(prompt + completion)
            masks.append([0] * len(prompt) + [1] * length)
    sequences.append(list(range(50, 62)))  # a row that shares nothing
    masks.append([0] * 6 + [1] * 6)
    return TokenBatch.from_sequences(sequences, masks, pad_id=0)


def test_packed_scores_and_gradients_equal_the_plain_path(two_models) -> None:
    plain_model, packed_model = two_models
    batch = group_batch()
    assert packed_batch(batch, packed_model.pad_id) is not None  # the groups do get packed
    weights = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(1))
    results = []
    for model in (plain_model, packed_model):
        model.model.zero_grad()
        scored = model.score(batch, temperature=0.7, with_entropy=True)
        loss = ((scored.logprobs + 0.1 * scored.entropy) * weights * batch.loss_mask).sum()
        loss.backward()
        gradients = {name: parameter.grad.clone() for name, parameter
                     in model.model.named_parameters() if parameter.requires_grad}
        results.append((scored, loss, gradients))
    (plain, plain_loss, plain_grads), (packed, packed_loss, packed_grads) = results
    assert torch.allclose(plain.logprobs, packed.logprobs, atol=1e-5, rtol=0)
    assert torch.allclose(plain.entropy, packed.entropy, atol=1e-5, rtol=0)
    assert abs(plain_loss.item() - packed_loss.item()) < 1e-5 * max(1.0, abs(plain_loss.item()))
    assert plain_grads.keys() == packed_grads.keys()
    for name, gradient in plain_grads.items():
        assert torch.count_nonzero(gradient) > 0, name
        assert torch.allclose(gradient, packed_grads[name], atol=1e-5, rtol=1e-4), name


def test_attention_without_dense_masks_is_refused_for_packing(tiny_model_path) -> None:
    from src.language_models.instance.huggingface_lora_language_model import (
        HuggingfaceLoRALanguageModel,
    )

    with pytest.raises(ValueError, match="shared_prefix_training needs attention"):
        HuggingfaceLoRALanguageModel(str(tiny_model_path), device="cpu",
                                     attn_implementation="flash_attention_2")
