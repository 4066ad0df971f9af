from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from tests.conftest import PROJECT_ROOT
from tests.run_folders import process_command, run_in_new_process

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  rollout: {{batch_size: 4, group_size: 2}}
  task:
    name: slow_math
    module: tests.run.slow_math_task.SlowMathTask
    parameters: {{num_train: 24, num_validation: 2, levels: [1, 2, 3, 4]}}
  agent:
    name: oracle_agent
"""


def test_sigkill_mid_batch_then_rerun_logs_every_episode_once(tmp_path: Path) -> None:
    output = tmp_path / "run"
    config = tmp_path / "assignment.yaml"
    config.write_text(ASSIGNMENT.format(output=output))
    runs = output / "runs.jsonl"
    process = subprocess.Popen(process_command(config), cwd=PROJECT_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    # Kill once at least one batch is committed and the next is in flight.
    while time.time() < deadline:
        state_file = output / "run_state.json"
        if state_file.exists() and json.loads(state_file.read_text())["completed_batches"] >= 2:
            time.sleep(0.2)
            break
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    state = json.loads((output / "run_state.json").read_text())
    assert not state["finished"], "the run ended before it could be killed; slow it down"

    run_in_new_process(config)
    rows = [json.loads(line) for line in runs.read_text().split("\n") if line.strip()]
    counts = Counter((row["sample_id"], row["group_index"]) for row in rows)
    assert len(counts) == 24 * 2
    assert set(counts.values()) == {1}
    assert json.loads((output / "run_state.json").read_text())["finished"]
    assert json.loads((output / "summary.json").read_text())["overall"]["success_rate"] == 1.0


def test_changed_config_is_refused_on_resume(tmp_path: Path) -> None:
    output = tmp_path / "run"
    config = tmp_path / "assignment.yaml"
    config.write_text(ASSIGNMENT.format(output=output).replace("num_train: 24", "num_train: 4"))
    run_in_new_process(config)
    config.write_text(ASSIGNMENT.format(output=output).replace("num_train: 24", "num_train: 6"))
    result = subprocess.run(process_command(config), cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert "assignment_config.task.parameters.num_train" in result.stderr
