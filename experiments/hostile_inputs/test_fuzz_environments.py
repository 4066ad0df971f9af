"""The environment study tool: a short run counts its targets and finds no sound episode
unscored."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.hostile_inputs.fuzz_environments import main


def test_a_short_run_counts_raising_and_hanging_environments(tmp_path: Path) -> None:
    output = tmp_path / "fuzz.json"
    assert main(["--batches", "1", "--batch_size", "8", "--step_timeout_s", "0.5",
                 "--faults", "step_raises,step_hangs,reward_nan",
                 "--output", str(output)]) == 0
    targets = {t["target"]: t for t in json.loads(output.read_text())["targets"]}
    assert targets["gymnasium step_hangs"]["unscored_faulty"] > 0
    assert targets["textarena reward_nan"]["environment_errors"] > 0
    assert targets["textarena ConnectFour-v0 nonsense_opponent"]["no_agent_turn"] == 8
    assert all(t["crashes"] == t["unscored_sound"] == 0 for t in targets.values())
