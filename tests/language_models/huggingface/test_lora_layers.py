"""LoRA products in the base's dtype (`lora_compute_dtype: base`): a bf16 base's adapter
products run in bf16 with float32 weights and gradients, within a stated tolerance of an
fp32 model's figures; an fp32 base and everything PEFT's own forward handles are
unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from src.language_models.huggingface.lora_layers import InputDtypeLoraLinear
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import TokenBatch

LORA = LoRASettings(r=4, lora_alpha=8, target_modules="all-linear")


def _policy(path: Path, dtype: str, compute: str) -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(3)
    model = HuggingfaceLoRALanguageModel(model_name_or_path=str(path), dtype=dtype,
                                         device="cpu", lora_config=LORA,
                                         lora_compute_dtype=compute)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():  # a trained adapter: B is zero at the start
        for parameter in model.trainable_parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    model.train_mode(dropout=False)
    return model


def _batch() -> TokenBatch:
    ids = torch.randint(5, 2000, (3, 24), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    return TokenBatch(input_ids=ids, attention_mask=mask, loss_mask=mask)


def _scored(model: HuggingfaceLoRALanguageModel, **options: bool
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's log-prob and the gradient of their sum (every trainable parameter; none
    with the adapter switched off)."""
    model.model.zero_grad()
    logprobs = model.score(_batch(), **options).logprobs
    if logprobs.requires_grad:
        logprobs.sum().backward()
    gradient = torch.cat([parameter.grad.flatten() for parameter in model.trainable_parameters()
                          if parameter.grad is not None] or [torch.zeros(0)])
    return logprobs.detach()[:, 1:], gradient


class _LinearInputs(TorchFunctionMode):
    """The dtypes of the inputs of every linear product run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func is torch.nn.functional.linear:
            self.dtypes.add(args[0].dtype)
        return func(*args, **(kwargs or {}))


def test_a_bf16_bases_adapter_products_take_bf16_inputs(tiny_model_path: Path) -> None:
    for compute, expected in (("base", {torch.bfloat16}),
                              ("float32", {torch.bfloat16, torch.float32})):
        model = _policy(tiny_model_path, "bfloat16", compute)
        layer = model.model.get_base_model().model.layers[0].self_attn.q_proj
        assert isinstance(layer, InputDtypeLoraLinear) == (compute == "base")
        with _LinearInputs() as seen:
            layer(torch.randn(2, 5, layer.in_features, dtype=torch.bfloat16))
        assert seen.dtypes == expected, compute


def test_bf16_products_keep_the_fp32_models_figures_within_the_tolerance(
        tiny_model_path: Path) -> None:
    exact_logprobs, exact_gradient = _scored(_policy(tiny_model_path, "float32", "float32"))
    errors = {}
    for compute in ("base", "float32"):
        model = _policy(tiny_model_path, "bfloat16", compute)
        logprobs, gradient = _scored(model)
        assert all(parameter.dtype == torch.float32 and parameter.grad.dtype == torch.float32
                   for parameter in model.trainable_parameters())
        errors[compute] = ((logprobs - exact_logprobs).abs().mean().item(),
                           torch.cosine_similarity(gradient, exact_gradient, dim=0).item())
    # the stated tolerance: a mean log-prob within 0.01 of the fp32 model's (bf16 rounds a
    # log-prob by about that much; here, with an adapter as large as the base's weights,
    # 0.0023 against PEFT's 0.0013), a gradient pointing the same way
    for compute, (mean_error, cosine) in errors.items():
        assert mean_error < 0.01 and cosine > 0.98, (compute, errors)


def test_gradients_accumulate_in_float32_across_backward_passes(tiny_model_path: Path) -> None:
    model = _policy(tiny_model_path, "bfloat16", "base")
    _, once = _scored(model)
    model.score(_batch()).logprobs.sum().backward()  # a second micro-batch, no zero_grad
    twice = torch.cat([parameter.grad.flatten() for parameter in model.trainable_parameters()])
    assert torch.equal(twice, once + once)


def test_an_fp32_base_and_the_adapter_switched_off_are_unchanged(tiny_model_path: Path) -> None:
    for dtype, options in (("float32", {}), ("bfloat16", {"with_adapter": False})):
        ours = _scored(_policy(tiny_model_path, dtype, "base"), **options)
        pefts = _scored(_policy(tiny_model_path, dtype, "float32"), **options)
        assert torch.equal(ours[0], pefts[0]), dtype
        assert torch.equal(ours[1], pefts[1]), dtype


def test_a_saved_adapter_is_the_same_files_as_pefts(tiny_model_path: Path,
                                                     tmp_path: Path) -> None:
    for compute in ("base", "float32"):
        _policy(tiny_model_path, "bfloat16", compute).save_adapter(tmp_path / compute)
    files = sorted(path.name for path in (tmp_path / "base").iterdir())
    assert "adapter_config.json" in files
    assert files == sorted(path.name for path in (tmp_path / "float32").iterdir())
    for name in files:
        assert (tmp_path / "base" / name).read_bytes() == (tmp_path / "float32" / name
                                                           ).read_bytes(), name


@pytest.mark.parametrize("compute", ["base", "float32"])
def test_an_adapter_saved_in_either_mode_loads_in_the_other(tiny_model_path: Path,
                                                           tmp_path: Path, compute: str) -> None:
    saved = _policy(tiny_model_path, "bfloat16", compute)
    saved.save_adapter(tmp_path / "adapter")
    other = "float32" if compute == "base" else "base"
    torch.manual_seed(0)
    loaded = HuggingfaceLoRALanguageModel(model_name_or_path=str(tiny_model_path),
                                          dtype="bfloat16", device="cpu", lora_config=LORA,
                                          lora_compute_dtype=other,
                                          adapter_path=str(tmp_path / "adapter"))
    for ours, theirs in zip(loaded.trainable_parameters(), saved.trainable_parameters(),
                            strict=True):
        assert torch.equal(ours, theirs)
