"""The supervised stage teaches the embedded model: a few DB-bench oracle demonstrations
(the base model answers every problem in a format the task cannot read) and a few steps,
and held-out greedy replies follow the format."""

from __future__ import annotations

import json
from pathlib import Path

from src.run_experiment import main
from tests.conftest import requires_embedded_model

CONFIG = """\
supervised_training_config:
  output_dir: {output}
  random_seed: 3
  language_model:
    name: policy
    module: src.language_models.instance.huggingface_lora_language_model
    parameters:
      model_name_or_path: embedded:smollm2-135m
      lora_config: {{r: 8, lora_alpha: 16, target_modules: all-linear, lora_dropout: 0.0}}
  task:
    name: db_bench_single_skill
    parameters: {{num_train: 24, num_validation: 11, seed: 3, max_round: 3,
                 skills: [insert, delete, update, select, where_single_condition]}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, max_new_tokens: 96}}
  demonstrations:
    oracle: {{num_samples: 24}}
  training:
    epochs: 2
    batch_size: 8
    save_every_steps: 2
    optimizer: {{learning_rate: 1e-3, lr_schedule: cosine, warmup_ratio: 0.1}}
  evaluation: {{max_samples: 11, batch_size: 11}}
"""


@requires_embedded_model
def test_oracle_demonstrations_teach_the_held_out_format(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(CONFIG.format(output=tmp_path / "out"))
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    first, last = rows[0], rows[-1]
    assert last["step"] == 6
    assert last["loss"] < 0.5 * rows[1]["loss"]
    # measured: 10 of 11 base replies unreadable, 5 of 11 after the 6 steps (greedy)
    assert first["eval/format_error"] >= 0.9
    assert last["eval/format_error"] <= first["eval/format_error"] - 0.3
