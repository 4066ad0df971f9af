"""Data-parallel training with FSDP over gloo workers (Ray actors) against one process.

Two workers, the same seed, model and rows: three optimiser steps must give the adapter
one process gives, within 1e-5, and a run saved after two steps and resumed by new
workers must end where the uninterrupted one ends. The workers score and update, so the
process that drives them can hold its policy without base weights (`base_weights: meta`):
every tensor of it but the adapter stays on the meta device, and the results are the
same."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import BaseWeights
from src.training.learner import Learner, Shard
from src.training.objectives import CrossEntropyObjective, PolicyObjective
from src.training.policy_losses import POLICY_LOSSES, ClipRange
from src.training.settings import OptimizerSettings
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows

ray = pytest.importorskip("ray")


def _model(path: Path, base_weights: BaseWeights = "load") -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(0)
    model = HuggingfaceLoRALanguageModel(
        model_name_or_path=str(path), dtype="float32",
        lora_config=LoRASettings(r=4, lora_alpha=8, target_modules="all-linear",
                                 lora_dropout=0.0), base_weights=base_weights)
    with torch.no_grad():  # a trained adapter: B = 0 would leave A without a gradient
        for name, parameter in model.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05)
    return model


def _rows(model: HuggingfaceLoRALanguageModel) -> TokenRows:
    """Two groups of three completions sharing a prompt (packed in training), advantages
    of both signs, and old log-probs off the current policy."""
    generator = torch.Generator().manual_seed(1)
    sequences, masks = [], []
    for group in range(2):
        prompt = model.tokenizer.encode(f"Question {group}: what is {group} + 7?")
        for member in range(3):
            completion = torch.randint(10, 500, (4 + 2 * member,), generator=generator).tolist()
            sequences.append(prompt + completion)
            masks.append([0] * len(prompt) + [1] * len(completion))
    rows = TokenRows.from_sequences(sequences, masks, pad_id=model.pad_id)
    rows.advantages = torch.tensor([1.0, -0.5, -0.5, 0.8, 0.2, -1.0])
    rows.old_logprobs = Learner(model, OptimizerSettings()).score(rows) - 0.05 * rows.batch.loss_mask
    return rows


def _objective() -> PolicyObjective:
    return PolicyObjective(POLICY_LOSSES["ppo_clip"](ClipRange(0.2, 0.2, 3.0)),
                           with_entropy=True)


# Small micro-batches: 6 rows in 3 or more micro-batches, an uneven share for 2 workers.
SETTINGS = OptimizerSettings(optimizer_class="SGD", learning_rate=0.5,
                             micro_batch_max_tokens=40, max_grad_norm=1.0)


def _adapter(model: HuggingfaceLoRALanguageModel) -> list[torch.Tensor]:
    return [parameter.detach().clone() for parameter in model.trainable_parameters()]


def _assert_holds_only_the_adapter(model: HuggingfaceLoRALanguageModel) -> None:
    adapter = model.trainable_parameters()
    assert adapter and all(parameter.device.type == "cpu" for parameter in adapter)
    held = [name for name, tensor in [*model.model.named_parameters(),
                                      *model.model.named_buffers()]
            if not tensor.is_meta and not any(tensor is own for own in adapter)]
    assert not held, f"the driver holds base tensors {held[:3]}"


def test_shards_take_every_micro_batch_once_and_the_same_number_of_passes() -> None:
    micro = [[0], [1, 2], [3], [4], [5]]
    shares = [Shard(rank, 2).passes(micro) for rank in range(2)]
    assert [len(share) for share in shares] == [3, 3]
    counted = sorted(row for share in shares for part, counts in share if counts for row in part)
    assert counted == [0, 1, 2, 3, 4, 5]
    assert shares[1][-1] == ([0], False)  # the short worker repeats one, counted zero times


def test_two_fsdp_workers_train_the_adapter_one_process_trains(ray_cluster,
                                                                tiny_model_path: Path) -> None:
    from src.training.sharded_learner import ShardedLearner

    single_model = _model(tiny_model_path)
    sharded_model = _model(tiny_model_path, base_weights="meta")
    _assert_holds_only_the_adapter(sharded_model)
    rows = _rows(single_model)
    assert len(Learner(single_model, SETTINGS).micro_batches(rows, range(6))) >= 3
    single = Learner(single_model, SETTINGS)
    sharded = ShardedLearner(sharded_model, SETTINGS, num_workers=2)
    try:
        for step in range(3):
            indices = [0, 1, 2, 3, 4, 5] if step != 1 else [5, 3, 1, 0]
            single_metrics, sharded_metrics = TokenMetrics(), TokenMetrics()
            expected = single.update(rows, indices, _objective(), single_metrics)
            got = sharded.update(rows, indices, _objective(), sharded_metrics)
            assert got.loss == pytest.approx(expected.loss, abs=1e-5)
            assert got.grad_norm == pytest.approx(expected.grad_norm, rel=1e-5)
            assert sharded_metrics.means() == pytest.approx(single_metrics.means(), abs=1e-5)
        moved = max((a - b).abs().max().item() for a, b in zip(
            _adapter(single_model), _adapter(_model(tiny_model_path)), strict=True))
        assert moved > 1e-2  # the steps did change the adapter
        for a, b in zip(_adapter(single_model), _adapter(sharded_model), strict=True):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
        # the workers score (each row once) what this process would score, also with
        # another adapter swapped in for the call (the KL reference's starting adapter)
        assert sharded.score(rows).sub(single.score(rows)).abs().max().item() < 1e-5
        start = _adapter(_model(tiny_model_path))
        reference = single.score(rows, adapter=start)
        assert sharded.score(rows, adapter=start).sub(reference).abs().max().item() < 1e-5
        assert reference.sub(single.score(rows)).abs().max().item() > 1e-3
        for a, b in zip(_adapter(single_model), _adapter(sharded_model), strict=True):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=0)  # put back after the call
        # the base model's scores (adapter off, the KL reference), and training after them
        base = sharded.score(rows, with_adapter=False)
        assert base.sub(single.score(rows, with_adapter=False)).abs().max().item() < 1e-5
        expected = single.update(rows, range(6), _objective(), TokenMetrics())
        assert sharded.update(rows, range(6), _objective(), TokenMetrics()).loss == (
            pytest.approx(expected.loss, abs=1e-5))
        for a, b in zip(_adapter(single_model), _adapter(sharded_model), strict=True):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
        _assert_holds_only_the_adapter(sharded_model)  # the adapter came back, nothing more
    finally:
        sharded.close()


def test_a_sharded_run_saved_and_resumed_by_new_workers_ends_where_it_would_have(
        ray_cluster, tiny_model_path: Path, tmp_path: Path) -> None:
    from src.training.sharded_learner import ShardedLearner

    settings = SETTINGS.model_copy(update={"optimizer_class": "AdamW", "learning_rate": 1e-2,
                                           "lr_schedule": "cosine", "warmup_ratio": 0.25})
    objective = CrossEntropyObjective(dropout=False)
    # the straight run's driver holds the base weights, the interrupted one's does not
    straight_model = _model(tiny_model_path)
    resumed_model = _model(tiny_model_path, base_weights="meta")
    rows = _rows(straight_model)
    straight = ShardedLearner(straight_model, settings, num_workers=2)
    try:
        straight.schedule(4)
        for _ in range(3):
            straight.update(rows, range(6), objective, TokenMetrics())
    finally:
        straight.close()

    first = ShardedLearner(resumed_model, settings, num_workers=2)
    try:
        first.schedule(4)
        for _ in range(2):
            first.update(rows, range(6), objective, TokenMetrics())
        first.save(tmp_path, {"note": "two steps"})
    finally:
        first.close()
    # the checkpoint is the single-process learner's: it loads into one process too
    one = Learner(_model(tiny_model_path), settings)
    one.schedule(4)
    assert one.restore(tmp_path)["note"] == "two steps" and one.step == 2
    assert len(one.optimizer.state_dict()["state"]) == len(one.model.trainable_parameters())

    fresh_model = _model(tiny_model_path, base_weights="meta")
    resumed = ShardedLearner(fresh_model, settings, num_workers=2)
    try:
        resumed.schedule(4)
        resumed.restore(tmp_path)
        assert resumed.learning_rate == pytest.approx(one.learning_rate)
        resumed.update(rows, range(6), objective, TokenMetrics())
    finally:
        resumed.close()
    for a, b in zip(_adapter(straight_model), _adapter(fresh_model), strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)
