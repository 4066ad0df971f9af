"""The two example verifiers environments on the embedded model, 2 batches each: the
recipe (arithmetic, single-turn) trains, the calculator (multi-turn, prompted tools) runs
through training (here (2 cores): about 30 s and 60 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.conftest import requires_embedded_model
from tests.run_folders import jsonl_rows, run_recipe_cut

pytest.importorskip("verifiers", reason="the verifiers adapter's package (the `verifiers` extra)")

def two_batches(tmp_path: Path, task: str = "") -> tuple[list[dict], list[dict]]:
    """The recipe cut to 2 batches of 4 samples x 4, with `task` overriding its task;
    the run's metrics rows and episodes."""
    run = run_recipe_cut(tmp_path, "verifiers_examples.yaml", f"""\
  rollout: {{max_batches: 2, batch_size: 4}}
  evaluation: {{max_samples: 8}}
{task}""")
    assert json.loads((run / "run_state.json").read_text())["completed_batches"] == 2
    return jsonl_rows(run / "metrics.jsonl"), jsonl_rows(run / "runs.jsonl")


@pytest.mark.slow
@requires_embedded_model
def test_the_recipe_trains_on_the_single_turn_environment(tmp_path: Path) -> None:
    rows, episodes = two_batches(tmp_path)
    assert [row["step"] for row in rows if "rollout/correct" in row] == [1, 2]
    assert sum("eval/correct" in row for row in rows) == 2  # at the start and at the end
    assert len(episodes) == 32 and all(e["status"] == "completed" for e in episodes)
    assert all(e["reward"] == e["metrics"]["correct"] for e in episodes)  # its own reward
    adapter = load_file(tmp_path / "run" / "callback_state" / "rl_training"
                        / "checkpoint-000002" / "lora_weights" / "adapter_model.safetensors")
    assert any(tensor.abs().max() > 0 for name, tensor in adapter.items() if "lora_B" in name)


@pytest.mark.slow
@requires_embedded_model
def test_the_multi_turn_tool_environment_runs_through_training(tmp_path: Path) -> None:
    # the embedded model does not call the tool yet (its rewards are all 0, so the update
    # is empty): this checks the path, the tool episode's tokens are checked in
    # test_verifiers_task.py
    rows, episodes = two_batches(tmp_path, """\
  task:
    name: verifiers
    parameters:
      environment: examples.verifiers_envs.calculator
      validation_arguments: {split: validation}
      max_turns: 3
      tool_protocol: prompted
  agent: {name: openai_client_agent, parameters: {max_new_tokens: 48}}
""")
    assert [row["step"] for row in rows if "rollout/model_calls" in row] == [1, 2]
    assert all(e["status"] in ("completed", "agent_context_limit") for e in episodes)
    assert all("verifiers_transcript" in e["info"] for e in episodes
               if e["status"] == "completed")
