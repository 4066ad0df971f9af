"""The learner's update: gradient checkpointing holds in every objective's update, an
update whose objective keeps dropout off scores exactly as sampling does, and a step that
leaves weights that are not finite numbers stops the run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.training.learner import Learner, NonFiniteUpdate
from src.training.objectives import CrossEntropyObjective, PolicyObjective
from src.training.policy_losses import POLICY_LOSSES, ClipRange
from src.training.settings import OptimizerSettings
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows


def _model(path: Path, gradient_checkpointing: bool) -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(0)
    return HuggingfaceLoRALanguageModel(
        str(path), dtype="float32", device="cpu", gradient_checkpointing=gradient_checkpointing,
        lora_config=LoRASettings(r=4, lora_alpha=8, lora_dropout=0.5))


def _rows(model: HuggingfaceLoRALanguageModel) -> TokenRows:
    sequences = [model.tokenizer.encode(f"Question {n}: what is {n} + 7? It is {n + 7}.")
                 for n in range(4)]
    masks = [[0] * 8 + [1] * (len(sequence) - 8) for sequence in sequences]
    rows = TokenRows.from_sequences(sequences, masks, pad_id=model.pad_id)
    rows.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    rows.old_logprobs = Learner(model, OptimizerSettings()).score(rows)
    return rows


def _count_checkpointed_calls(model: HuggingfaceLoRALanguageModel) -> list[int]:
    """Wrap each layer's checkpoint function; the list's one entry counts the calls."""
    calls = [0]
    for module in model.model.modules():
        function = getattr(module, "_gradient_checkpointing_func", None)
        if getattr(module, "gradient_checkpointing", False) and function is not None:
            def counted(*args, _function=function, **kwargs):
                calls[0] += 1
                return _function(*args, **kwargs)
            module._gradient_checkpointing_func = counted
    return calls


def _policy_objective() -> PolicyObjective:
    return PolicyObjective(POLICY_LOSSES["ppo_clip"](ClipRange(0.2, 0.2, 3.0)))


def test_gradient_checkpointing_runs_in_rl_and_supervised_updates(tiny_model_path: Path
                                                                  ) -> None:
    model = _model(tiny_model_path, gradient_checkpointing=True)
    layers = model.model.get_base_model().config.num_hidden_layers
    rows = _rows(model)
    learner = Learner(model, OptimizerSettings(micro_batch_max_tokens=None))
    calls = _count_checkpointed_calls(model)
    for objective in (_policy_objective(), CrossEntropyObjective()):
        calls[0] = 0
        learner.update(rows, range(len(rows)), objective, TokenMetrics())
        assert calls[0] == layers, type(objective).__name__
    assert not model.model.training  # back in eval mode after the step


def test_checkpointed_rl_update_keeps_dropout_off_and_equals_the_plain_one(
        tiny_model_path: Path) -> None:
    """On policy the ratio is 1 only if the update scores as sampling did: with LoRA
    dropout 0.5 in the config, the checkpointed update's loss and adapter equal the
    un-checkpointed one's."""
    results = []
    for checkpointed in (False, True):
        model = _model(tiny_model_path, gradient_checkpointing=checkpointed)
        rows = _rows(model)
        learner = Learner(model, OptimizerSettings(optimizer_class="SGD", learning_rate=0.5,
                                                   micro_batch_max_tokens=None))
        step = learner.update(rows, range(len(rows)), _policy_objective(), TokenMetrics())
        results.append((step.loss, [p.detach().clone() for p in model.trainable_parameters()]))
    (plain_loss, plain), (checkpointed_loss, checkpointed) = results
    assert abs(plain_loss - checkpointed_loss) < 1e-6
    for before, after in zip(plain, checkpointed, strict=True):
        assert torch.allclose(before, after, atol=1e-6)


def test_a_step_that_leaves_weights_not_finite_stops_with_a_clear_error(
        tiny_model_path: Path) -> None:
    """A loss that is not a finite number (here an advantage that is NaN) makes every
    weight NaN after the step; every later sample would be garbage and every later batch
    would fail, so the step stops the run instead of letting it skip on."""
    model = _model(tiny_model_path, gradient_checkpointing=False)
    rows = _rows(model)
    rows.advantages = torch.tensor([1.0, math.nan, 0.5, -0.5])
    learner = Learner(model, OptimizerSettings(micro_batch_max_tokens=None))
    with pytest.raises(NonFiniteUpdate, match=r"optimiser step 1 \(loss nan.*not finite "
                                              r"numbers in \d+ of the adapter's tensors"):
        learner.update(rows, range(len(rows)), _policy_objective(), TokenMetrics())


def test_the_learner_refuses_rows_past_the_models_context(tiny_model_path: Path) -> None:
    model = _model(tiny_model_path, gradient_checkpointing=False)
    learner = Learner(model, OptimizerSettings())
    rows = TokenRows.from_sequences([[5] * 10, [5] * (model.max_context_tokens + 1)],
                                    [[1] * 10, [1] * (model.max_context_tokens + 1)],
                                    pad_id=model.pad_id)
    message = f"row 1 has {model.max_context_tokens + 1} tokens, past the model's context"
    with pytest.raises(ValueError, match=message):
        learner.score(rows)
    with pytest.raises(ValueError, match=message):
        learner.update(rows, [0, 1], CrossEntropyObjective(), TokenMetrics())
