"""Faulty environments: a math run whose task steps raise or hang at given rates.

Runs `run_experiment.py` on the math task with injected faults (tests/run/
flaky_math_task.py: a step raises with probability --error_rate and sleeps for an hour
with probability --hang_rate, drawn from the episode's seed, so a rerun fails alike) and
reads back what the run wrote: how many batches completed (tried again, skipped), how many
episodes ended as task errors and why, whether runs.jsonl holds every episode once, and
whether the metrics count the failures.

python bench/faulty_environments.py --output_dir outputs/faulty_environments
    [--agent oracle|model] [--batches 400] [--error_rate 0.05] [--hang_rate 0.01]
    [--step_timeout_s 1]
`--agent model` trains the quickstart's GRPO agent instead of the oracle (slow: 20 batches).
Writes OUTPUT_DIR/faulty_environments.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ORACLE = """\
  rollout: {{batch_size: 8, group_size: 2, max_batches: {batches},
            faults: {{step_timeout_s: {timeout}}}}}
  agent: {{name: oracle_agent}}
"""
MODEL = """\
  rollout: {{batch_size: 8, group_size: 4, max_batches: {batches},
            faults: {{step_timeout_s: {timeout}}}}}
  evaluation: {{at_start: true, at_end: true, max_samples: 64, temperature: 1.0}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters:
        model_name_or_path: embedded:smollm2-135m
        role_dict: {{user: user, agent: assistant}}
        lora_config: {{r: 16, lora_alpha: 32, target_modules: all-linear, lora_dropout: 0.0}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, temperature: 1.0, max_new_tokens: 30}}
  callback_dict:
    rl_training:
      name: rl_training
      parameters: {{language_model: policy, algorithm: grpo, ppo: {{aggregation: token-mean}},
                   learning_rate: 2e-4, optimizer: {{max_grad_norm: 1.0}}}}
"""
TASK = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 42
  task:
    name: flaky_math
    module: tests.run.flaky_math_task.FlakyMathTask
    parameters: {{levels: {levels}, num_train: {num_train}, num_validation: 64,
                 reward_weights: {{accuracy: 0.9, boxed_number: 0.1}},
                 step_error_rate: {error_rate}, step_hang_rate: {hang_rate}, hang_s: 3600}}
"""


def jsonl(path: Path) -> list[dict]:
    # split at newlines only: a reply may hold U+2028, which str.splitlines also splits at
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")
            if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--agent", choices=["oracle", "model"], default="oracle")
    parser.add_argument("--batches", type=int, default=None,
                        help="default 400 with the oracle, 20 with the model")
    parser.add_argument("--error_rate", type=float, default=0.05)
    parser.add_argument("--hang_rate", type=float, default=0.01)
    parser.add_argument("--step_timeout_s", type=float, default=1.0)
    arguments = parser.parse_args()
    output = arguments.output_dir.resolve()
    output.mkdir(parents=True, exist_ok=True)
    oracle = arguments.agent == "oracle"
    batches = arguments.batches or (400 if oracle else 20)
    episodes_per_batch = 16 if oracle else 32
    config = output / "assignment.yaml"
    config.write_text(TASK.format(
        output=output / "run", levels=[1, 2, 3, 4] if oracle else [1],
        num_train=batches * 8, error_rate=arguments.error_rate,
        hang_rate=arguments.hang_rate) + (ORACLE if oracle else MODEL).format(
        batches=batches, timeout=arguments.step_timeout_s))
    started = time.monotonic()
    with (output / "run.log").open("w") as log:
        status = subprocess.run(
            [sys.executable, str(PROJECT_ROOT / "src" / "run_experiment.py"), "--config_path",
             str(config), "--no_progress"], cwd=PROJECT_ROOT, stdout=log, stderr=log
        ).returncode
    seconds = time.monotonic() - started

    runs = jsonl(output / "run" / "runs.jsonl")
    rows = [row for row in jsonl(output / "run" / "metrics.jsonl") if "batch/tries" in row]
    failed = [run for run in runs if run["status"] == "task_error"]
    reasons = Counter("timeout" if "step_timeout_s" in run["error"]
                      else "raised" for run in failed)
    keys = Counter((run["batch_index"], run["sample_id"], run["group_index"]) for run in runs)
    counted = sum(round(row["rollout/status/task_error"] * row["rollout/episodes"])
                  for row in rows)
    evaluations = [row for row in jsonl(output / "run" / "metrics.jsonl")
                   if "eval/accuracy" in row]
    result = {
        "command": " ".join(sys.argv), "exit_status": status, "seconds": round(seconds, 1),
        "batches": batches, "batches_logged": len(rows),
        "batches_completed": sum(not row["batch/skipped"] for row in rows),
        "batches_tried_twice": sum(row["batch/tries"] > 1 for row in rows),
        "batches_skipped": sum(bool(row["batch/skipped"]) for row in rows),
        "episodes": len(runs), "episodes_expected": batches * episodes_per_batch,
        "episodes_logged_twice": sum(count > 1 for count in keys.values()),
        "task_errors": len(failed), "task_errors_raised": reasons["raised"],
        "task_errors_timed_out": reasons["timeout"],
        "task_errors_counted_in_metrics": counted,
        "eval_accuracy": {int(row["step"]): row["eval/accuracy"] for row in evaluations},
    }
    (output / "faulty_environments.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
