"""examples/custom_task trains as its README says: the quickstart's recipe on the
fifteen-line task, cut to 2 batches (here: about 80 s on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from src.run_experiment import main
from tests.conftest import PROJECT_ROOT, requires_embedded_model

EXAMPLE = PROJECT_ROOT / "examples" / "custom_task" / "config.yaml"
SHORT_RUN = """\
import: {example}
assignment_config:
  rollout: {{max_batches: 2}}
  evaluation: {{max_samples: 8}}
"""


@requires_embedded_model
def test_the_example_trains_with_its_rubric_in_the_metrics(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(SHORT_RUN.format(example=EXAMPLE))
    output = tmp_path / "run"
    assert main(["--config_path", str(config), "--output_dir", str(output),
                 "--no_progress"]) == 0
    state = json.loads((output / "run_state.json").read_text())
    assert state["finished"] and state["completed_batches"] == 2
    rows = [json.loads(line) for line in (output / "metrics.jsonl").open()]
    for prefix in ("rollout/", "eval/"):
        logged = [row for row in rows if f"{prefix}correct" in row]
        assert len(logged) == 2, prefix  # two batches; evaluation at start and at end
        assert all(row[f"{prefix}brief/error"] == 0.0 and f"{prefix}brief" in row
                   for row in logged)
    # LoRA's B matrices start at zero: any that is not has been trained
    adapter = load_file(output / "callback_state" / "rl_training" / "checkpoint-000002"
                        / "lora_weights" / "adapter_model.safetensors")
    assert any(tensor.abs().max() > 0 for name, tensor in adapter.items() if "lora_B" in name)
