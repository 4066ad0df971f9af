"""The learner's update: gradient checkpointing holds in every objective's update, an
update whose objective keeps dropout off scores exactly as sampling does, a step that
leaves weights that are not finite numbers stops the run, and a step whose gradient is
exactly zero skips the forward and changes no bit of the run."""

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


class _AlwaysScored:
    """A policy objective the learner always scores: the run to compare the skip with."""

    def __init__(self, objective: PolicyObjective) -> None:
        self._objective = objective
        self.with_entropy, self.dropout = objective.with_entropy, objective.dropout

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        return self._objective(*args, **kwargs)

    def vanishes(self, rows: TokenRows, indices: list[int]) -> bool:
        return False


def _steps_with_a_zero_advantage_one(tiny_model_path: Path, skip: bool
                                     ) -> tuple[Learner, list[int]]:
    """Four AdamW steps (weight decay, a cosine schedule after a warmup), the third on
    advantages all 0; how many times each step called the model's score."""
    model = _model(tiny_model_path, gradient_checkpointing=False)  # LoRA dropout 0.5
    rows = _rows(model)
    learner = Learner(model, OptimizerSettings(learning_rate=1e-2, weight_decay=0.1,
                                               micro_batch_max_tokens=16))
    learner.schedule(4, warmup_ratio=0.5, kind="cosine")
    objective = _policy_objective() if skip else _AlwaysScored(_policy_objective())
    calls = [0]
    score = model.score

    def counted(*args, **kwargs):
        calls[0] += 1
        return score(*args, **kwargs)

    model.score = counted
    scores_per_step = []
    for advantages in ([1.0, -1.0, 0.5, -0.5], [0.5, 0.5, -1.0, 0.0], [0.0] * 4,
                       [-1.0, 1.0, 0.0, 0.0]):
        rows.advantages = torch.tensor(advantages)
        before = calls[0]
        learner.update(rows, range(len(rows)), objective, TokenMetrics())
        scores_per_step.append(calls[0] - before)
    return learner, scores_per_step


def test_a_step_on_zero_advantages_skips_the_forward_and_changes_no_bit(
        tiny_model_path: Path) -> None:
    """The skipped step still steps AdamW, on zero gradients: the weights decay and take
    the momentum of the earlier steps, the state decays and counts, the schedule moves.
    After it and a later scored step, weights, optimiser and schedule state and torch's
    generator equal, bit for bit, those of a run that scored the step."""
    torch.manual_seed(5)
    skipped, skipped_scores = _steps_with_a_zero_advantage_one(tiny_model_path, skip=True)
    skipped_generator = torch.get_rng_state()
    torch.manual_seed(5)
    scored, scored_scores = _steps_with_a_zero_advantage_one(tiny_model_path, skip=False)
    assert skipped_scores[2] == 0 and scored_scores[2] > 0
    assert skipped_scores[:2] + skipped_scores[3:] == scored_scores[:2] + scored_scores[3:]
    assert torch.equal(skipped_generator, torch.get_rng_state())
    for one, other in zip(skipped.model.trainable_parameters(),
                          scored.model.trainable_parameters(), strict=True):
        assert torch.equal(one, other)
    one, other = skipped.optimizer.state_dict(), scored.optimizer.state_dict()
    assert one["param_groups"] == other["param_groups"]
    assert one["state"].keys() == other["state"].keys()
    for index, state in one["state"].items():
        for key, value in state.items():
            assert torch.equal(value, other["state"][index][key]), (index, key)
    assert skipped.scheduler.state_dict() == scored.scheduler.state_dict()
    assert skipped.step == scored.step == 4


def test_the_scored_backward_of_zero_advantages_leaves_exact_zeros(
        tiny_model_path: Path) -> None:
    """What the skipped step stands in for: a gradient of zeros (not None) on every
    trainable parameter, in its dtype and shape."""
    model = _model(tiny_model_path, gradient_checkpointing=False)
    rows = _rows(model)
    rows.advantages = torch.zeros(len(rows))
    learner = Learner(model, OptimizerSettings(micro_batch_max_tokens=None))
    model.train_mode(dropout=False)
    learner._accumulate_gradients(rows, range(len(rows)), _policy_objective(),
                                  TokenMetrics(), 1.0)
    for parameter in model.trainable_parameters():
        assert parameter.grad is not None and parameter.grad.dtype == parameter.dtype
        assert torch.equal(parameter.grad, torch.zeros_like(parameter))


def test_only_a_vanishing_objective_without_dropout_skips_the_forward(
        tiny_model_path: Path) -> None:
    model = _model(tiny_model_path, gradient_checkpointing=False)
    rows = _rows(model)
    rows.advantages = torch.tensor([0.0, 0.0, 1.0, 0.0])
    objective = _policy_objective()
    assert Learner.skips_forward(rows, [0, 1, 3], objective)
    assert not Learner.skips_forward(rows, [0, 2], objective)
    objective.dropout = True  # a forward with dropout draws random numbers
    assert not Learner.skips_forward(rows, [0, 1, 3], objective)
    assert not Learner.skips_forward(rows, [0, 1, 3], CrossEntropyObjective(dropout=False))
