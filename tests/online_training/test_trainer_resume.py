"""Training on the embedded model is deterministic and survives SIGKILL losslessly."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import PROJECT_ROOT, requires_embedded_model
from tests.run_folders import process_command, run_in_new_process

pytestmark = [pytest.mark.slow, requires_embedded_model]

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 7
  rollout: {{batch_size: 2, group_size: 2, max_batches: 4}}
  task:
    name: math_problems
    # credit for a boxed number and the length reward spread groups even when every sum
    # is wrong, so that the update has something to learn from
    parameters: {{num_train: 16, num_validation: 2, worked_example: true,
                  reward_weights: {{accuracy: 0.9, boxed_number: 0.1, length: 0.5}}}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters:
        lora_config: {{r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj], lora_dropout: 0.1}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, max_new_tokens: 24}}
  callback_dict:
    rl:
      name: rl_training
      parameters:
        language_model: policy
        advantage: {{estimator: grpo}}
        ppo: {{epochs: 2, mini_batch_size: 2}}
        kl: {{coef: 0.01}}
        optimizer: {{learning_rate: 1e-2, lr_schedule: cosine, warmup_ratio: 0.25}}
        trainer_workers: {{count: {workers}}}
"""


def final_adapter(output: Path) -> dict[str, torch.Tensor]:
    state = json.loads((output / "run_state.json").read_text())
    assert state["finished"]
    folder = output / "callback_state" / "rl" / f"checkpoint-{state['completed_batches']:06d}"
    return load_file(folder / "lora_weights" / "adapter_model.safetensors")


# 2: the update runs in two FSDP worker processes (gloo, Ray actors) that are killed with
# the run and started afresh by the resumed one
@pytest.mark.parametrize("workers", [1, 2])
def test_killed_run_resumes_to_the_same_adapter(tmp_path: Path, workers: int) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    for output in (straight, killed):
        (tmp_path / f"{output.name}.yaml").write_text(
            ASSIGNMENT.format(output=output, workers=workers))
    run_in_new_process(tmp_path / "straight.yaml")

    process = subprocess.Popen(process_command(tmp_path / "killed.yaml"), cwd=PROJECT_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        state_file = killed / "run_state.json"
        if state_file.exists() and json.loads(state_file.read_text())["completed_batches"] >= 1:
            break
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 2.0))  # anywhere in the next batch
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    run_in_new_process(tmp_path / "killed.yaml")

    expected, resumed = final_adapter(straight), final_adapter(killed)
    assert expected.keys() == resumed.keys()
    difference = max((expected[k] - resumed[k]).abs().max().item() for k in expected)
    print(f"\nmax |adapter difference| after resume: {difference:.3e}")
    assert difference <= 1e-6
    assert any(tensor.abs().max() > 0 for name, tensor in expected.items() if "lora_B" in name)
    rows = (straight / "runs.jsonl").read_text().splitlines()
    assert rows == (killed / "runs.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().split("\n") if line.strip()]
    assert [row["policy_version"] for row in metrics] == [1.0, 2.0, 3.0, 4.0]
