"""The task family's state is part of the commit: a killed run resumes with it.

The econ few-shot memory is learnt from finished groups, so a resumed run that lost it
would show different prompts (and log different chats) from the batch it redoes on.
"""

from __future__ import annotations

from pathlib import Path

from src.run_experiment import main
from tests.run.crash_in_batch import run_until_crash

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 5
  rollout: {{batch_size: 2, group_size: 2}}
  evaluation: {{at_start: false, at_end: false}}
  task:
    name: econ_decision
    parameters: {{num_train: 8, num_validation: 2, num_economies: 2, num_households: 20,
                  months: 24, few_shot_examples: 2}}
  agent:
    name: oracle_agent
"""
CRASH_AT_BATCH = 2  # batches 0 and 1 are committed, batch 2 is in flight


def write_config(folder: Path, name: str) -> Path:
    config = folder / f"{name}.yaml"
    config.write_text(ASSIGNMENT.format(output=folder / name))
    return config


def test_econ_memory_survives_a_kill_and_the_resumed_run_logs_the_same(tmp_path: Path) -> None:
    straight = write_config(tmp_path, "straight")
    assert main(["--config_path", str(straight), "--no_progress"]) == 0

    killed = write_config(tmp_path, "killed")
    run = run_until_crash(killed, CRASH_AT_BATCH)
    state = run.read_state()
    assert state is not None and state.completed_batches == CRASH_AT_BATCH
    saved = run.task_store().path(CRASH_AT_BATCH) / "few_shot_memory.json"
    assert saved.is_file() and '"experiences":[{' in saved.read_text()
    assert main(["--config_path", str(killed), "--no_progress"]) == 0

    logged = (tmp_path / "killed" / "runs.jsonl").read_text()
    assert logged == (tmp_path / "straight" / "runs.jsonl").read_text()
    assert "worked out well" in logged  # later prompts did show remembered decisions
    kept = sorted(path.name for path in (tmp_path / "killed" / "task_state").iterdir())
    assert kept == ["checkpoint-000002", "checkpoint-000003", "checkpoint-000004"]
