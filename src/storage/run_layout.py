"""The names of a run folder's files, one place for every pipeline and every reader (the
run kernel writes them; the report, export and evaluate commands read them).

    config.yaml          the config the run was started with
    run_state.json       the commit point: steps committed, the logs' committed sizes
    runs.jsonl           the online loop's episodes, one per line
    metrics.jsonl        one line of figures per step
    evaluation/          step-N.jsonl of the validation split, <split>/step-N.jsonl others
    summary.json         the run's end figures
    .run.lock            locked by the process that trains the run, while it runs
"""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = "config.yaml"
STATE_FILE = "run_state.json"
RUNS_LOG = "runs.jsonl"
METRICS_LOG = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".run.lock"  # held by the process training the run (src/storage/run_lock.py)
EVALUATION_FOLDER = "evaluation"
# each held-out split and the prefix of its figures in metrics.jsonl
EVALUATION_PREFIXES = {"validation": "eval/", "selection": "selection/"}


def evaluation_file(output_dir: Path, step: int, split: str = "validation") -> Path:
    """Where an evaluation's episodes go: evaluation/step-N.jsonl for the validation split,
    evaluation/<split>/step-N.jsonl for another."""
    folder = output_dir / EVALUATION_FOLDER
    return (folder if split == "validation" else folder / split) / f"step-{step:06d}.jsonl"
