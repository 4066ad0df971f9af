"""A policy built without its base weights (`base_weights: meta`): the adapter starts where
PEFT starts it over loaded weights, bit for bit, and the policy hands it out, saves and
loads it, but refuses to sample or score."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import BaseWeights, SamplingParams, TokenBatch

LORA = LoRASettings(r=4, lora_alpha=8, target_modules="all-linear")


def _built(path: Path, base_weights: BaseWeights, dtype: str = "float32",
           lora: LoRASettings = LORA) -> tuple[HuggingfaceLoRALanguageModel, torch.Tensor]:
    """The policy built on the CPU after seeding, and torch's random state after it (a
    meta driver replays PEFT's initialisation on the CPU; a policy loaded on a GPU draws its
    adapter from the GPU's generator)."""
    torch.manual_seed(11)
    model = HuggingfaceLoRALanguageModel(model_name_or_path=str(path), dtype=dtype,
                                         device="cpu", lora_config=lora,
                                         base_weights=base_weights)
    return model, torch.get_rng_state()


# The biased model: q/k/v/o carry frozen base biases beside the adapter. In bf16 PEFT rounds
# the fresh adapter to the base's dtype before casting it back to float32.
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_adapter_starts_where_peft_starts_it_over_loaded_weights(
        tiny_biased_model_path: Path, tmp_path: Path, dtype: str) -> None:
    loaded, state_after_loaded = _built(tiny_biased_model_path, "load", dtype)
    meta, state_after_meta = _built(tiny_biased_model_path, "meta", dtype)
    expected = dict(loaded.model.named_parameters())
    got = dict(meta.model.named_parameters())
    assert got.keys() == expected.keys()
    trainable = [name for name, parameter in got.items() if parameter.requires_grad]
    assert trainable == [name for name, parameter in expected.items() if parameter.requires_grad]
    for name in trainable:
        assert got[name].device.type == "cpu" and got[name].dtype == torch.float32
        assert torch.equal(got[name], expected[name]), name
    assert any(got[name].abs().sum() > 0 for name in trainable if "lora_A" in name)
    assert torch.equal(state_after_meta, state_after_loaded)  # the same draws, no more
    assert all(got[name].is_meta for name in got.keys() - set(trainable))
    assert all(buffer.is_meta for buffer in meta.model.buffers())
    loaded.save_adapter(tmp_path / "loaded")
    meta.save_adapter(tmp_path / "meta")
    for file in (tmp_path / "loaded").iterdir():
        assert (tmp_path / "meta" / file.name).read_bytes() == file.read_bytes(), file.name


def test_a_policy_without_base_weights_loads_adapters_but_neither_samples_nor_scores(
        tiny_model_path: Path, tmp_path: Path) -> None:
    loaded, _ = _built(tiny_model_path, "load")
    meta, _ = _built(tiny_model_path, "meta")
    with torch.no_grad():
        for parameter in loaded.trainable_parameters():
            parameter.add_(0.25)
    loaded.save_adapter(tmp_path)
    meta.load_adapter(tmp_path, 3)
    assert meta.policy_version == 3
    for a, b in zip(loaded.trainable_parameters(), meta.trainable_parameters(), strict=True):
        assert torch.equal(a, b)
    assert meta.device.type == "cpu"
    assert meta.end_of_turn_ids() == loaded.end_of_turn_ids()
    assert meta.max_context_tokens == loaded.max_context_tokens
    assert meta.replica_parameters("cpu")["base_weights"] == "load"  # a worker runs it
    batch = TokenBatch.from_sequences([[1, 2, 3]], [[0, 1, 1]], pad_id=meta.pad_id)
    calls = [("sample", lambda: meta.generate([[1, 2]], SamplingParams(max_new_tokens=2))),
             ("score", lambda: meta.score(batch)),
             ("score", lambda: meta.sequence_logprobs([[1, 2, 3]]))]  # the pool's probe
    for use, call in calls:
        with pytest.raises(RuntimeError, match=f"cannot {use}: this process holds no base "
                                               "weights"):
            call()


def test_an_adapter_that_trains_base_tensors_cannot_be_built_without_them(
        tiny_biased_model_path: Path) -> None:
    with pytest.raises(ValueError, match="bias: none"):
        _built(tiny_biased_model_path, "meta", lora=LORA.model_copy(update={"bias": "all"}))
