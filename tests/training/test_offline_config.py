"""The offline training file: strict keys, errors naming file, line and key, the dispatch."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.offline_training.config import load_offline_config, plan_offline_training
from src.run.pipeline import pipeline_of
from src.run_experiment import PIPELINES, main

VALID = """\
offline_training_config:
  output_dir: {output}
  language_model:
    name: policy
    module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
  groups:
    scored_rows: {{path: beams.jsonl, candidates_key: id_list, scores_key: score_list}}
  grpo: {{epochs: 2}}
  evaluation:
    max_samples: 4
    task: {{name: math_problems, parameters: {{num_train: 4, num_validation: 4}}}}
    agent: {{name: lora_rl_agent, parameters: {{language_model: policy}}}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "offline.yaml"
    path.write_text(text.format(output=tmp_path / "out"))
    return path


def plan(path: Path):
    source = YamlSource(path)
    return plan_offline_training(load_offline_config(source), source)


def test_valid_file_plans_without_loading_weights(tmp_path: Path) -> None:
    result = plan(write(tmp_path, VALID))
    offline = result.config.offline_training_config
    assert offline.groups.scored_rows is not None
    assert offline.groups.scored_rows.candidates_key == "id_list"
    assert (offline.warmup.epochs, offline.grpo.epochs, offline.grpo.top_k) == (1, 2, 3)
    assert result.task is not None and result.task.cls.__name__ == "MathProblemsTask"
    source = YamlSource(tmp_path / "offline.yaml")
    assert pipeline_of(source.data, PIPELINES, "offline.yaml").key == "offline_training_config"


def test_unknown_key_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("grpo: {{epochs: 2}}", "grpo: {{epochz: 2}}"))
    with pytest.raises(ConfigError) as error:
        plan(path)
    message = str(error.value)
    assert f"{path}:8" in message and "offline_training_config.grpo.epochz" in message
    assert "Extra inputs" in message


def test_exactly_one_group_source(tmp_path: Path) -> None:
    text = VALID.replace("  grpo:", "    runs_jsonl: {{path: runs.jsonl}}\n  grpo:")
    with pytest.raises(ConfigError, match=r"offline_training_config\.groups.*exactly one"):
        plan(write(tmp_path, text))


def test_evaluation_agent_must_name_the_trained_model(tmp_path: Path) -> None:
    text = VALID.replace("language_model: policy}", "language_model: other}")
    with pytest.raises(ConfigError, match=r"evaluation\.agent\.parameters\.language_model"):
        plan(write(tmp_path, text))


def test_dry_run_dispatches_on_the_top_level_key(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config_path", str(write(tmp_path, VALID)), "--dry_run"]) == 0
    assert "dry run: the config is valid" in capsys.readouterr().out
    bad = write(tmp_path, VALID.replace("output_dir:", "output_dri:"))
    assert main(["--config_path", str(bad), "--dry_run"]) == 2
    assert "offline_training_config.output_dri" in capsys.readouterr().err


def test_unreadable_groups_stop_the_run_before_any_weights_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = VALID.replace("path: beams.jsonl", f"path: {tmp_path / 'absent.jsonl'}")
    assert main(["--config_path", str(write(tmp_path, text)), "--no_progress"]) == 2
    assert f"data error: {tmp_path / 'absent.jsonl'}: no such file" in capsys.readouterr().err
