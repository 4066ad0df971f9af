"""The supervised stage end to end on the tiny model: oracle demonstrations, the loss
falling, checkpoints, evaluation, exact resume; and its data errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from src.training.learner import Learner, StepResult
from tests.run_folders import checkpoint_adapter, run_command

CONFIG = """\
supervised_training_config:
  output_dir: {output}
  random_seed: 5
  language_model:
    name: policy
    module: src.language_models.instance.huggingface_lora_language_model
    parameters:
      model_name_or_path: {model}
      lora_config: {{r: 8, lora_alpha: 16, target_modules: all-linear, lora_dropout: 0.1}}
  task:
    name: math_problems
    parameters: {{num_train: 12, num_validation: 2, max_round: 1}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, system_prompt: "Answer in a box.", max_new_tokens: 4}}
  demonstrations:
    oracle: {{num_samples: 12}}
    {extra_source}
  training:
    epochs: 3
    batch_size: 4
    length_bucket_batches: 2
    save_every_steps: 2
    optimizer: {{learning_rate: 3e-2, lr_schedule: cosine, warmup_ratio: 0.1,
                micro_batch_max_tokens: 200}}
  evaluation: {{every_steps: 4, max_samples: 2, batch_size: 2}}
"""


def write_config(folder: Path, name: str, model: Path, extra_source: str = "") -> Path:
    config = folder / f"{name}.yaml"
    config.write_text(CONFIG.format(output=folder / name, model=model,
                                    extra_source=extra_source))
    return config


@pytest.fixture(scope="module")
def straight_run(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 oracle chats, 3 epochs of 3 steps; commits at 2, 4, 6, 8, 9."""
    folder = tmp_path_factory.mktemp("sft")
    assert run_command(write_config(folder, "out", tiny_model_path)) == 0
    return folder / "out"


def test_oracle_demonstrations_train_with_commits_and_evaluation(
        straight_run: Path) -> None:
    demonstrations = [json.loads(line) for line in (straight_run / "demonstrations.jsonl").open()]
    assert len(demonstrations) == 12  # the math oracle wins every train sample
    assert demonstrations[0]["source"] == "oracle:train-000000"
    assert demonstrations[0]["chat"][1][0] == "agent"
    assert "\\boxed{" in demonstrations[0]["chat"][1][1]
    rows = [json.loads(line) for line in (straight_run / "metrics.jsonl").open()]
    assert [row["step"] for row in rows] == [0, 2, 4, 6, 8, 9]
    assert rows[0]["demonstrations"] == 12.0 and "eval/success_rate" in rows[0]
    evaluated = [row["step"] for row in rows if "eval/success_rate" in row]
    assert evaluated == [0, 4, 8, 9]
    # (the tiny random model cannot fit the demonstrations: its logits are too small to
    # peak; tests/supervised_training/test_supervised_learning.py shows learning)
    assert all(row["loss"] > 0 and row["grad_norm"] > 0 for row in rows[1:])
    assert rows[-1]["epoch"] == 3.0
    state = json.loads((straight_run / "run_state.json").read_text())
    assert state["completed_batches"] == 9 and state["finished"]
    kept = sorted(path.name for path in (straight_run / "training_state").iterdir())
    assert kept == ["best", "checkpoint-000006", "checkpoint-000008", "checkpoint-000009"] or (
        kept == ["checkpoint-000006", "checkpoint-000008", "checkpoint-000009"])
    assert sorted(path.name for path in (straight_run / "evaluation").iterdir()) == [
        f"step-{step:06d}.jsonl" for step in evaluated]


def test_a_killed_run_resumes_to_the_same_adapter(tiny_model_path: Path, tmp_path: Path,
                                                  straight_run: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path, "resumed", tiny_model_path)
    original_update = Learner.update
    steps = []

    def step_then_crash(self: Learner, *arguments: Any, **keywords: Any) -> StepResult:
        result = original_update(self, *arguments, **keywords)
        steps.append(1)
        if len(steps) == 5:  # after commit 4, in the middle of the next block
            raise KeyboardInterrupt("killed")
        return result

    with monkeypatch.context() as patch:
        patch.setattr(Learner, "update", step_then_crash)
        with pytest.raises(KeyboardInterrupt):
            run_command(config)
    output = tmp_path / "resumed"
    assert json.loads((output / "run_state.json").read_text())["completed_batches"] == 4
    assert run_command(config) == 0

    expected, resumed = checkpoint_adapter(straight_run, 9), checkpoint_adapter(output, 9)
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[key], resumed[key]) for key in expected)
    assert any(tensor.abs().max() > 0 for key, tensor in expected.items() if "lora_B" in key)
    straight = [json.loads(line) for line in (straight_run / "metrics.jsonl").open()]
    again = [json.loads(line) for line in (output / "metrics.jsonl").open()]
    assert [row["step"] for row in again] == [row["step"] for row in straight]
    for before, after in zip(straight, again, strict=True):  # wall-clock rates aside
        assert {k: v for k, v in before.items() if "per_s" not in k} == {
            k: v for k, v in after.items() if "per_s" not in k}


def test_chats_jsonl_rows_are_checked_with_file_and_line(tiny_model_path: Path,
                                                         tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "1+1?"},
                                              {"role": "assistant", "content": "2"}]}) + "\n"
                     + json.dumps({"messages": [{"role": "user", "content": "2+2?"}]}) + "\n")
    config = write_config(tmp_path, "bad", tiny_model_path,
                          f"chats_jsonl: {{path: {chats}}}")
    assert run_command(config) == 2
    error = capsys.readouterr().err
    assert f"{chats}:2: key 'messages'" in error and "must end with an assistant" in error


def test_rejection_sampling_keeps_only_the_runs_successes(tiny_model_path: Path,
                                                          tmp_path: Path,
                                                          straight_run: Path) -> None:
    """The straight run's evaluation episodes, only the correct ones, as demonstrations,
    with a chat oversampled."""
    episodes = straight_run / "evaluation" / "step-000009.jsonl"
    records = [json.loads(line) for line in episodes.open()]
    config = tmp_path / "rs.yaml"
    text = write_config(tmp_path, "rs", tiny_model_path).read_text().replace(
        "    oracle: {num_samples: 12}\n",
        f"    runs_jsonl: {{path: {episodes}}}\n"
        f"    chats_jsonl: {{path: {tmp_path / 'chats.jsonl'}}}\n"
        "    oversample: [{reply_pattern: '^2$', times: 3}]\n")
    config.write_text(text.replace("epochs: 3", "epochs: 1"))
    (tmp_path / "chats.jsonl").write_text(json.dumps({"messages": [
        {"role": "system", "content": "Be terse."}, {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"}]}) + "\n")
    assert run_command(config) == 0
    kept = [json.loads(line) for line in (tmp_path / "rs" / "demonstrations.jsonl").open()]
    correct = [record for record in records if record["outcome"] == "correct"]
    assert len(kept) == len(correct) + 3 and len(records) == 2  # the chat three times
    assert kept[-3] == kept[-2] == kept[-1]
    assert kept[-1]["system_prompt"] == "Be terse." and kept[-1]["chat"] == [
        ["user", "1+1?"], ["agent", "2"]]


def test_best_is_chosen_on_the_selection_split_where_it_is_evaluated(
        tiny_model_path: Path, tmp_path: Path) -> None:
    text = CONFIG.format(output=tmp_path / "out", model=tiny_model_path, extra_source="")
    config = tmp_path / "selection.yaml"
    config.write_text(
        text.replace("name: math_problems\n    parameters: {num_train: 12, num_validation: 2, "
                     "max_round: 1}",
                     "name: db_bench_single_skill\n    parameters: {num_train: 4, "
                     "num_validation: 2, num_selection: 2, max_round: 1}")
        .replace("oracle: {num_samples: 12}", "oracle: {num_samples: 4}")
        .replace("epochs: 3", "epochs: 1")
        .replace("evaluation: {every_steps: 4,",
                 "evaluation: {splits: [selection, validation], every_steps: 1,"))
    assert run_command(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    assert [row["step"] for row in rows] == [0, 1]
    assert all("selection/success_rate" in row and "eval/success_rate" in row for row in rows)
    best = json.loads((tmp_path / "out" / "training_state" / "best" / "best.json").read_text())
    assert best["metric"] == "selection/success_rate" and best["step"] == 1
    assert (tmp_path / "out" / "evaluation" / "selection" / "step-000001.jsonl").is_file()


def test_a_selection_split_the_task_does_not_draw_is_refused(
        tiny_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = CONFIG.format(output=tmp_path / "out", model=tiny_model_path, extra_source="")
    config = tmp_path / "selection.yaml"
    config.write_text(text.replace("evaluation: {every_steps: 4,",
                                   "evaluation: {splits: [selection], every_steps: 4,"))
    assert run_command(config) == 2
    assert (f"{config}:26, key 'supervised_training_config.evaluation.splits': names "
            "'selection', but the task MathProblemsTask draws no selection samples"
            ) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_at_start_false_skips_the_evaluation_before_training(tiny_model_path: Path,
                                                             tmp_path: Path) -> None:
    text = CONFIG.format(output=tmp_path / "out", model=tiny_model_path, extra_source="")
    config = tmp_path / "late.yaml"
    config.write_text(text.replace("evaluation: {every_steps: 4,",
                                   "evaluation: {at_start: false, every_steps: 4,"))
    assert run_command(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    assert rows[0]["step"] == 0 and rows[0]["demonstrations"] == 12.0
    assert [row["step"] for row in rows if "eval/success_rate" in row] == [4, 8, 9]
    assert sorted(path.name for path in (tmp_path / "out" / "evaluation").iterdir()) == [
        "step-000004.jsonl", "step-000008.jsonl", "step-000009.jsonl"]


def test_the_dry_run_names_each_demonstration_source(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = CONFIG.format(output=tmp_path / "out", model="embedded:smollm2-135m",
                         extra_source="chats_jsonl: {path: chats.jsonl}\n"
                                      "    max_demonstrations: 5\n"
                                      "    oversample: [{reply_pattern: REST, times: 3}]")
    config = tmp_path / "plan.yaml"
    config.write_text(text)
    assert run_command(config, "--dry_run") == 0
    assert ("demonstrations: oracle on the first 12 train samples, chats_jsonl chats.jsonl "
            "(at most 5 of them)\noversample x3: {'reply_pattern': 'REST'}\n"
            ) in capsys.readouterr().out
