"""The parts a Hugging Face LoRA policy is built from: the attention implementation, the
in-process sampler (chosen from the model's config before any weights load, so that a
refusal comes first) and the PEFT model itself."""

from __future__ import annotations

from typing import Any, Literal

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from src.language_models.huggingface.custom_masks import takes_custom_masks
from src.language_models.huggingface.generate_sampler import GenerateSampler
from src.language_models.huggingface.grouped_attention import GROUPED_SDPA
from src.language_models.huggingface.kv_cache_sampler import KVCacheSampler
from src.language_models.huggingface.lora_layers import with_input_dtype_products
from src.language_models.huggingface.lora_model_settings import LoRAComputeDtype, LoRASettings
from src.language_models.huggingface.meta_base import lora_model_on_meta_base
from src.language_models.huggingface.sampler import Sampler
from src.language_models.huggingface.static_cache_sampler import StaticCacheSampler
from src.language_models.language_model import BaseWeights

SamplerName = Literal["auto", "kv_cache", "static_cache", "generate"]


def attention_implementation(asked: str, device: torch.device,
                             shared_prefix_training: bool) -> str:
    """`auto` resolved (see grouped_attention; CUDA kernels prefer sdpa); packing needs
    attention that reads the packs' 4-D masks."""
    implementation = asked if asked != "auto" else (
        "sdpa" if device.type == "cuda" else GROUPED_SDPA)
    if shared_prefix_training and not takes_custom_masks(implementation):
        raise ValueError(f"shared_prefix_training needs attention that reads 4-D masks, "
                         f"not '{implementation}': set it to false or use sdpa")
    return implementation


def build_sampler(name: SamplerName, model_config: Any, attention: str, device: torch.device,
                  pad_id: int, prefix_caching: bool, model_name: str) -> Sampler:
    """The sampler `name` asks for (auto: static_cache on CUDA where it decodes the model
    right, kv_cache elsewhere), refused where it cannot decode this model."""
    dense_masks = takes_custom_masks(attention)  # the static cache hands its own masks
    if name == "auto":
        name = ("static_cache" if device.type == "cuda" and dense_masks
                and StaticCacheSampler.covers(model_config) else "kv_cache")
    elif name == "static_cache" and not StaticCacheSampler.covers(model_config):
        raise ValueError(f"sampler static_cache cannot decode {model_name}: its "
                         "sliding-window attention needs transformers' own masks (use "
                         "kv_cache)")
    elif name == "static_cache" and not dense_masks:
        raise ValueError(f"sampler static_cache needs attention that reads 4-D masks, "
                         f"not '{attention}': use kv_cache or sdpa")
    if name == "kv_cache":
        return KVCacheSampler(device, pad_id, prefix_caching)
    if name == "static_cache":
        return StaticCacheSampler(device, pad_id, prefix_caching)
    return GenerateSampler(device, pad_id)


def lora_model(path: str, settings: LoRASettings, dtype: torch.dtype, device: torch.device,
               attention: str, gradient_checkpointing: bool,
               base_weights: BaseWeights, compute_dtype: LoRAComputeDtype) -> PeftModel:
    """The base model (or its shape on the meta device) with a fresh LoRA adapter."""
    lora = LoraConfig(
        r=settings.r, lora_alpha=settings.lora_alpha, target_modules=settings.target_modules,
        lora_dropout=settings.lora_dropout, bias=settings.bias, task_type=settings.task_type,
        init_lora_weights=True)  # B = 0: the policy starts exactly at the base model
    if compute_dtype == "base":
        lora = with_input_dtype_products(lora)
    if base_weights == "meta":
        model = lora_model_on_meta_base(path, lora, dtype, attention)
    else:
        base = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation=attention).to(device)
        if gradient_checkpointing:
            base.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        model = get_peft_model(base, lora)
    peft_config = model.peft_config["default"]
    if isinstance(peft_config.target_modules, set):  # `all-linear` resolved to a set,
        # which adapter_config.json would list in the process's hash order: sorted, a
        # run's checkpoints are the same bytes whichever process wrote them
        peft_config.target_modules = sorted(peft_config.target_modules)
    return model
