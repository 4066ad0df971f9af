"""The engine contract on the tiny random Llama: what every caller may rely on without
asking which engine it holds (pad id, roles, versioned adapters, seeded sampling), how
the pool turns an `engine` name and the trainer into engines, and how the contract stands
apart from the trained policy's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.instance.vllm_language_model import VLLMLanguageModel
from src.language_models.language_model import (
    EnginePlacement,
    InferenceEngine,
    LanguageModel,
    SamplingParams,
    TrainableLanguageModel,
)
from src.language_models.rollout_pool.engine_names import engine_class
from src.language_models.rollout_pool.pool import RolloutPool


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> HuggingfaceLoRALanguageModel:
    return HuggingfaceLoRALanguageModel(
        str(tiny_model_path), role_dict={"Agent": "model"},
        lora_config=LoRASettings(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))


def test_pad_id_and_roles_have_defaults(model: HuggingfaceLoRALanguageModel) -> None:
    tokenizer = model.tokenizer
    expected = tokenizer.pad_token_id
    assert model.pad_id == (expected if expected is not None else tokenizer.eos_token_id)
    assert model.role_dict == {"user": "user", "agent": "model"}


def test_a_seed_repeats_the_draws_of_torch_manual_seed(model: HuggingfaceLoRALanguageModel
                                                       ) -> None:
    prompts = [model.tokenizer.encode("one two three"), model.tokenizer.encode("four")]
    params = SamplingParams(n=2, max_new_tokens=8)
    seeded = model.generate(prompts, params, seed=11)
    torch.manual_seed(11)  # what a pool's engine actor did before seeds were in the contract
    assert [[g.token_ids for g in s] for s in model.generate(prompts, params)] == \
        [[g.token_ids for g in s] for s in seeded]
    assert [[g.token_ids for g in s] for s in model.generate(prompts, params, seed=12)] != \
        [[g.token_ids for g in s] for s in seeded]


def test_load_adapter_labels_the_policy_version(model: HuggingfaceLoRALanguageModel,
                                                tmp_path: Path) -> None:
    model.save_adapter(tmp_path)
    model.load_adapter(tmp_path, 5)
    assert model.policy_version == 5
    model.mark_updated()
    assert model.policy_version == 6
    model.set_policy_version(0)
    assert model.policy_version == 0


def test_each_engine_class_builds_its_parameters_from_the_trainer(
        model: HuggingfaceLoRALanguageModel) -> None:
    hf = HuggingfaceLoRALanguageModel.parameters_for_pool(model, EnginePlacement())
    assert hf["device"] == "cpu" and hf["lora_config"] == model.lora_settings
    assert hf["role_dict"] == model.role_dict
    vllm = VLLMLanguageModel.parameters_for_pool(
        model, EnginePlacement(gpus_per_engine=0, tensor_parallel_size=4))
    assert vllm["max_lora_rank"] == 4 and vllm["tensor_parallel_size"] == 4
    assert vllm["distributed_executor_backend"] == "ray"


def test_engine_names_resolve_in_one_place() -> None:
    assert engine_class("hf") is HuggingfaceLoRALanguageModel
    assert engine_class("vllm") is VLLMLanguageModel
    assert engine_class("src.language_models.instance.vllm_language_model."
                        "VLLMLanguageModel") is VLLMLanguageModel
    with pytest.raises(ValueError, match="short name"):
        engine_class("hff")
    with pytest.raises(ValueError, match="not an InferenceEngine"):
        engine_class("src.language_models.language_model.SamplingParams")


def test_tensor_parallel_is_refused_for_engines_that_cannot_shard(
        model: HuggingfaceLoRALanguageModel) -> None:
    # refused before Ray starts
    with pytest.raises(ValueError, match="HuggingfaceLoRALanguageModel does not"):
        RolloutPool(model, engine="hf", tensor_parallel_size=2)


def test_a_trained_policy_need_not_be_an_engine() -> None:
    """The trainable contract asks nothing of a pool's engine: a class that fills in only
    its abstract methods is built, and is a LanguageModel (the config resolves language
    models by that) but no InferenceEngine; the Hugging Face policy is both."""
    assert "parameters_for_pool" not in TrainableLanguageModel.__abstractmethods__
    only_trainable = type("OnlyTrainable", (TrainableLanguageModel,),
                          dict.fromkeys(TrainableLanguageModel.__abstractmethods__))()
    assert isinstance(only_trainable, LanguageModel)
    assert not isinstance(only_trainable, InferenceEngine)
    only_trainable.mark_updated()
    assert only_trainable.policy_version == 1
    assert issubclass(HuggingfaceLoRALanguageModel, TrainableLanguageModel)
    assert issubclass(HuggingfaceLoRALanguageModel, InferenceEngine)
    assert not issubclass(VLLMLanguageModel, TrainableLanguageModel)
    assert not issubclass(RolloutPool, TrainableLanguageModel | InferenceEngine)
