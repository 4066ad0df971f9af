"""What a run prints when it ends: the held-out evaluation at its first and last step with
95% Wilson intervals, the best checkpoint, and where its curves are (drawn now, so that no
second command is needed; `python -m src.report` draws them for any run)."""

from __future__ import annotations

import json
from pathlib import Path

from scipy.stats import binomtest

from src.report.curves import load_metrics, write_report

SUCCESS, EPISODES = "eval/success_rate", "eval/episodes"


def success_with_interval(successes: int, trials: int) -> str:
    """`p% [low, high] (k/n)`: the 95% Wilson interval of a success rate."""
    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return (f"{100 * successes / trials:.1f}% [{100 * interval.low:.1f}, "
            f"{100 * interval.high:.1f}] ({successes}/{trials})")


def describe_success(row: dict[str, float], prefix: str = "eval/") -> str:
    trials = int(row[f"{prefix}episodes"])
    return (f"{success_with_interval(round(row[f'{prefix}success_rate'] * trials), trials)} "
            f"at step {int(row['step'])}")


def evaluation_line(row: dict[str, float], split: str = "validation") -> str:
    """One evaluation's success with its interval, as a run's last lines print it."""
    prefix = "eval/" if split == "validation" else f"{split}/"
    return (f"evaluation ({split} split, success, 95% Wilson interval): "
            f"{describe_success(row, prefix)}")


def end_of_run_report(output_dir: Path) -> str:
    rows = load_metrics(output_dir)
    evaluated = [row for row in rows if SUCCESS in row and row.get(EPISODES, 0) > 0]
    if evaluated:
        figures = " -> ".join(describe_success(row) for row in (
            evaluated[:1] if len(evaluated) == 1 else (evaluated[0], evaluated[-1])))
        lines = [f"evaluation (validation split, success, 95% Wilson interval): {figures}"]
    else:
        lines = ["evaluation: none logged (set evaluation.at_start / at_end / every_n_batches)"]
    for marker in sorted(output_dir.glob("*/*/best/best.json")) + sorted(
            output_dir.glob("*/best/best.json")):
        record = json.loads(marker.read_text(encoding="utf-8"))
        lines.append(f"best checkpoint: {marker.parent} {json.dumps(record)}")
    written = write_report(output_dir)
    curves = [path.name for path in written if path.suffix == ".png"]
    lines.append(f"curves: {output_dir / 'report'} ({', '.join(curves)}); "
                 f"first and last values: {output_dir / 'report' / 'summary.md'}")
    return "\n".join(lines)
