"""Offline group training end to end on the tiny model: checkpoints, best/, metrics, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import TokenBatch
from src.offline_training.groups import ScoredGroup, tokenize_groups
from src.offline_training.trainer import MARGIN
from src.records.chat import ChatMessage
from src.records.episode import EpisodeRecord
from src.training.learner import Learner, StepResult
from tests.run_folders import checkpoint_adapter, run_command

CONFIG = """\
offline_training_config:
  output_dir: {output}
  random_seed: 3
  language_model:
    name: policy
    module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
    parameters:
      model_name_or_path: {model}
      device: cpu
      lora_config: {{r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj]}}
  groups:
    runs_jsonl: {{path: {runs}}}
  warmup: {{epochs: 1}}
  grpo: {{epochs: 2, top_k: 2, top_k_epochs: 1, kl_band_high: {kl_limit}}}
  training: {{learning_rate: 2e-2, groups_per_step: 2, micro_batch_max_tokens: 120}}
  evaluation:
    max_samples: 2
    batch_size: 2
    task:
      name: math_problems
      parameters: {{num_train: 2, num_validation: 2}}
    agent:
      name: lora_rl_agent
      parameters: {{language_model: policy, max_new_tokens: 3}}
"""

QUESTIONS = ["1+1?", "2+5?", "3*3?", "9-4?", "6/2?"]


def write_runs(path: Path) -> Path:
    """Five groups of three replies with distinct rewards, as an online run logs them."""
    rows = []
    for index, question in enumerate(QUESTIONS):
        for group_index, (reply, reward) in enumerate(
                [("\\boxed{7}", 0.1), (f"The answer is {index}", 1.0), ("no idea", 0.0)]):
            rows.append(EpisodeRecord(
                sample_id=f"s{index}", group_index=group_index, batch_index=index // 3,
                category="default", status="completed", outcome="unknown", reward=reward,
                turns=1, prompt_tokens=0, completion_tokens=0,
                chat=[ChatMessage(role="user", content=question),
                      ChatMessage(role="agent", content=reply)]).model_dump(mode="json"))
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_config(tmp_path: Path, name: str, model: Path, kl_limit: float = 10.0) -> Path:
    runs = write_runs(tmp_path / "runs.jsonl")
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG.format(output=tmp_path / name, model=model, runs=runs,
                                    kl_limit=kl_limit))
    return config


@pytest.fixture(scope="module")
def straight_run(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run: 1 warm-up + 2 GRPO epochs."""
    folder = tmp_path_factory.mktemp("straight")
    assert run_command(write_config(folder, "out", tiny_model_path)) == 0
    return folder / "out"


def test_warmup_then_grpo_writes_checkpoints_best_and_metrics(straight_run: Path) -> None:
    output = straight_run
    state = output / "training_state"
    assert sorted(path.name for path in state.glob("checkpoint-*")) == [
        "checkpoint-000001", "checkpoint-000002", "checkpoint-000003"]
    best = json.loads((state / "best" / "best.json").read_text())
    marked = []  # checkpoints that were a new best when written
    for epoch in (1, 2, 3):  # the layout of every pipeline's checkpoints
        names = {path.name for path in (state / f"checkpoint-{epoch:06d}").iterdir()}
        assert names - {"best.json"} == {"lora_weights", "optimizer_state.pt", "rng_state.pt",
                                         "training_step.json", "checksums.json"}
        marked += [epoch] if "best.json" in names else []
    assert marked[-1] == best["epoch"]
    assert (state / "best" / "lora_weights" / "adapter_model.safetensors").is_file()

    rows = [json.loads(line) for line in (output / "metrics.jsonl").open()]
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert all(MARGIN in row and "eval/accuracy" in row and "kl" in row for row in rows)
    assert "tau" in rows[1] and rows[1]["learning_rate"] == pytest.approx(2e-3)  # 0.1x
    for row in rows[2:]:
        assert {"loss", "grad_norm", "learning_rate", "kl_coef", "clip_ratio"} <= row.keys()
    # the curriculum: top-2 of each of the 5 groups first, then all 3
    assert [rows[2]["candidates"], rows[3]["candidates"]] == [10.0, 15.0]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # epoch 0: still the base model
    assert rows[3][MARGIN] > rows[0][MARGIN]  # training separates best from worst
    margins = {row["step"]: row[MARGIN] for row in rows if row["step"] > 0}
    assert best["epoch"] == max(margins, key=margins.get)
    assert best["value"] == pytest.approx(margins[best["epoch"]])
    assert (output / "evaluation" / "step-000003.jsonl").is_file()
    assert json.loads((output / "run_state.json").read_text())["finished"]
    assert (output / "groups.jsonl").read_text().count("\n") == 5


def test_old_logprobs_are_frozen_at_the_start_of_grpo(tiny_model_path: Path,
                                                      straight_run: Path) -> None:
    state = straight_run / "training_state"
    old = torch.load(state / "old_logprobs" / "logprobs.pt")
    reference = torch.load(state / "reference_logprobs" / "logprobs.pt")
    # what the policy after the warm-up (checkpoint 1) gives, not the base model
    model = HuggingfaceLoRALanguageModel(
        str(tiny_model_path), device="cpu",
        lora_config=LoRASettings(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        adapter_path=str(state / "checkpoint-000001" / "lora_weights"))
    groups = [ScoredGroup.model_validate_json(line)
              for line in (straight_run / "groups.jsonl").open()]
    data = tokenize_groups(groups, model, system_prompt=None)
    expected = []
    with torch.no_grad():
        for sequence, mask in zip(data.sequences, data.masks, strict=True):
            batch = TokenBatch.from_sequences([sequence], [mask], model.pad_id)
            expected.append(model.score(batch).logprobs[0][batch.loss_mask[0] > 0])
    assert len(old) == len(expected) == 15
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(old, expected, strict=True))
    assert not all(torch.allclose(a, b, atol=1e-4) for a, b in zip(old, reference, strict=True))


def test_no_best_checkpoint_when_every_epoch_leaves_the_kl_band(tiny_model_path: Path,
                                                                tmp_path: Path) -> None:
    config = write_config(tmp_path, "out", tiny_model_path, kl_limit=0.0)
    # a full-rate warm-up: every epoch's KL is then clearly above 0
    config.write_text(config.read_text().replace("warmup: {epochs: 1}",
                                                 "warmup: {epochs: 1, learning_rate_scale: 1.0}"))
    assert run_command(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    assert all(row["kl"] > 1e-4 for row in rows[1:])
    assert not (tmp_path / "out" / "training_state" / "best").exists()


@pytest.mark.parametrize("interrupted_epoch", [2, 3])
def test_interrupted_run_resumes_to_the_same_adapter(tiny_model_path: Path, tmp_path: Path,
                                                     straight_run: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     interrupted_epoch: int) -> None:
    config = write_config(tmp_path, "resumed", tiny_model_path)

    original_update = Learner.update
    steps = []

    def step_then_crash(self: Learner, *arguments: Any, **keywords: Any) -> StepResult:
        result = original_update(self, *arguments, **keywords)
        steps.append(1)
        # 3 steps an epoch: crash after the first step of the interrupted epoch
        if len(steps) == 3 * (interrupted_epoch - 1) + 1:
            raise KeyboardInterrupt("killed")
        return result

    with monkeypatch.context() as patch:
        patch.setattr(Learner, "update", step_then_crash)
        with pytest.raises(KeyboardInterrupt):
            run_command(config)
    output = tmp_path / "resumed"
    assert json.loads((output / "run_state.json").read_text())["completed_batches"] == (
        interrupted_epoch - 1)
    assert run_command(config) == 0

    expected, resumed = checkpoint_adapter(straight_run, 3), checkpoint_adapter(output, 3)
    assert expected.keys() == resumed.keys()
    difference = max((expected[key] - resumed[key]).abs().max().item() for key in expected)
    assert difference <= 1e-6
    assert any(tensor.abs().max() > 0 for key, tensor in expected.items() if "lora_B" in key)
    straight_rows = [json.loads(line) for line in (straight_run / "metrics.jsonl").open()]
    resumed_rows = [json.loads(line) for line in (output / "metrics.jsonl").open()]
    assert [row["step"] for row in resumed_rows] == [0, 1, 2, 3]
    assert resumed_rows[-1][MARGIN] == pytest.approx(straight_rows[-1][MARGIN], abs=1e-5)
