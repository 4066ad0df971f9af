"""rollout.max_staleness 1: the next batch rolls out from a Ray pool of Hugging Face engines
while the trainer updates (a tiny random Llama, a real local cluster, real processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.online_training.plan import load_online_config, plan_online_training
from src.tasks.splits import Splits
from tests.conftest import PROJECT_ROOT
from tests.run_folders import process_command, run_in_new_process

pytest.importorskip("ray")

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 3
  rollout: {{batch_size: 2, group_size: 2, max_batches: 8, max_staleness: 1}}
  task:
    name: slow_math
    module: tests.run.slow_math_task.SlowMathTask
    parameters: {{num_train: 16, num_validation: 2, levels: [1]}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters:
        model_name_or_path: {model}
        lora_config: {{r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj]}}
    - name: rollout_pool
      module: src.language_models.rollout_pool.pool.RolloutPool
      parameters: {{trainer: policy, engine: hf, num_engines: 1, verify_sync: false,
                   max_staleness: {pool_lag}}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: {sampler}, temperature: 1.0, max_new_tokens: 8}}
  callback_dict:
    rl_training:
      name: rl_training
      parameters:
        language_model: policy
        algorithm: reinforce
        learning_rate: 1e-2
        max_policy_staleness: {kept}
        mismatch: {{old_logprobs: trainer, correction: tis}}
"""


def _write(tmp_path: Path, model: Path, sampler: str = "rollout_pool", kept: object = 1,
           pool_lag: int = 1) -> tuple[Path, Path]:
    output = tmp_path / "run"
    config = tmp_path / "assignment.yaml"
    config.write_text(ASSIGNMENT.format(output=output, model=model, sampler=sampler,
                                        kept=kept, pool_lag=pool_lag))
    return config, output


def _plan(config: Path) -> None:
    plan_online_training(*load_online_config(config))


def test_overlap_needs_a_pool_to_sample_from(tmp_path: Path, tiny_model_path: Path) -> None:
    config, _ = _write(tmp_path, tiny_model_path, sampler="policy")
    with pytest.raises(ConfigError, match="rollout pool") as error:
        _plan(config)
    assert "assignment_config.rollout.max_staleness" in str(error.value)


def test_overlap_with_a_pool_that_syncs_itself_sooner_is_refused(
        tmp_path: Path, tiny_model_path: Path) -> None:
    # with max_staleness 0 the pool took the new policy for the batch sampled ahead
    # whenever the update ended before that batch's first request: a race
    config, _ = _write(tmp_path, tiny_model_path, pool_lag=0)
    with pytest.raises(ConfigError, match="'rollout_pool' syncs .* max_staleness=0"):
        _plan(config)


def test_overlap_with_a_callback_that_drops_stale_samples_is_refused(
        tmp_path: Path, tiny_model_path: Path) -> None:
    config, _ = _write(tmp_path, tiny_model_path, kept=0)
    with pytest.raises(ConfigError, match="every sample of an overlapped batch") as error:
        _plan(config)
    assert "callback_dict.rl_training.parameters" in str(error.value)
    assert "max_policy_staleness 1" in str(error.value)
    _plan(_write(tmp_path, tiny_model_path, kept="null")[0])  # keeps every sample


def test_overlap_with_an_agent_that_learns_from_episodes_is_refused(
        tmp_path: Path, tiny_model_path: Path) -> None:
    config, _ = _write(tmp_path, tiny_model_path)
    config.write_text(config.read_text().replace("name: lora_rl_agent",
                                                 "name: experience_replay_agent"))
    with pytest.raises(ConfigError, match="keeps state learnt from episodes"):
        _plan(config)


def test_overlapped_run_is_one_update_stale_and_resumes_without_loss_or_repeat(
        tmp_path: Path, tiny_model_path: Path) -> None:
    config, output = _write(tmp_path, tiny_model_path)
    log = (tmp_path / "first.log").open("w")
    process = subprocess.Popen(process_command(config), cwd=PROJECT_ROOT, stdout=log, stderr=log)
    state_file = output / "run_state.json"
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if state_file.exists() and json.loads(state_file.read_text())["completed_batches"] >= 3:
            break
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = json.loads(state_file.read_text())["completed_batches"]
    assert 3 <= killed_at < 8, (tmp_path / "first.log").read_text()[-3000:]

    run_in_new_process(config)
    assert json.loads(state_file.read_text())["finished"]

    rows = [json.loads(line) for line in (output / "runs.jsonl").read_text().split("\n") if line.strip()]
    # nothing lost, nothing trained twice: every (batch, sample, group) once
    counts = Counter((row["batch_index"], row["sample_id"], row["group_index"]) for row in rows)
    assert len(counts) == 8 * 2 * 2 and set(counts.values()) == {1}
    version = {row["batch_index"]: {r["policy_version"] for r in rows
                                    if r["batch_index"] == row["batch_index"]} for row in rows}
    # batch b was sampled during update b-1, i.e. by policy b-1; the first batch of the run
    # and the first after the resumption (the one in flight at the kill is redone from the
    # policy the checkpoint holds) are sampled alone, by policy b
    for batch in range(8):
        expected = batch if batch in (0, killed_at) else batch - 1
        assert version[batch] == {expected}, (batch, killed_at, version)
    steps = [json.loads(line) for line in (output / "metrics.jsonl").read_text().split("\n") if line.strip()]
    trained = [row for row in steps if "policy_version" in row]
    assert [row["step"] for row in trained] == list(range(1, 9))
    assert [row["policy_version"] for row in trained] == list(range(1, 9))
    for row in trained:
        stale = 0 if row["step"] - 1 in (0, killed_at) else 1
        assert row[f"policy_staleness/episodes_at_{stale}"] == 4.0
        assert row["policy_staleness/dropped"] == 0.0


@pytest.mark.parametrize("few_shot_examples", [0, 2])
def test_overlap_with_a_task_memory_is_refused(tmp_path: Path, few_shot_examples: int) -> None:
    from src.online_training.config import OnlineTrainingConfig
    from src.online_training.loop import OnlineTraining
    from src.online_training.plan import Components
    from src.run.folder import RunDirectory
    from src.tasks.instance.econ.task import EconDecisionTask

    assignment = OnlineTrainingConfig.model_validate({
        "task": {"name": "econ_decision"}, "agent": {"name": "oracle_agent"},
        "output_dir": str(tmp_path), "rollout": {"max_staleness": 1}})
    components = Components(
        make_task=lambda: EconDecisionTask(splits=Splits(num_train=4, num_validation=2),
                                           num_economies=1, num_households=10, months=12,
                                           few_shot_examples=few_shot_examples),
        agent=None, language_models={}, trainers={})  # type: ignore[arg-type]
    if few_shot_examples == 0:  # no memory: nothing the batch ahead could reach early
        OnlineTraining(assignment, components, RunDirectory(tmp_path)).task.close()
        return
    with pytest.raises(ValueError, match="keeps a memory learnt from episodes"):
        OnlineTraining(assignment, components, RunDirectory(tmp_path))
