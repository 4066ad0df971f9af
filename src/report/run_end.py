"""What a run prints when it ends: the held-out evaluation at its first and last step with
95% Wilson intervals, the best checkpoint, and where its curves and run page are (written
now, so that no second command is needed; `python -m src.report` writes them for any
run)."""

from __future__ import annotations

import json
from pathlib import Path

from src.maths.intervals import success_with_interval
from src.report.curves import load_metrics, write_report
from src.report.run_page import write_run_page
from src.storage.run_layout import EVALUATION_PREFIXES

SUCCESS, EPISODES = "eval/success_rate", "eval/episodes"


def describe_success(row: dict[str, float], prefix: str = "eval/") -> str:
    trials = int(row[f"{prefix}episodes"])
    return (f"{success_with_interval(round(row[f'{prefix}success_rate'] * trials), trials)} "
            f"at step {int(row['step'])}")


def evaluation_header(split: str) -> str:
    return f"evaluation ({split} split, success, 95% Wilson interval)"


def evaluation_line(row: dict[str, float], split: str = "validation") -> str:
    """One evaluation's success with its interval, as a run's last lines print it."""
    return f"{evaluation_header(split)}: {describe_success(row, EVALUATION_PREFIXES[split])}"


def end_lines(output_dir: Path) -> list[str]:
    """The held-out evaluation at the first and last step, and the best checkpoints."""
    rows = load_metrics(output_dir)
    evaluated = [row for row in rows if SUCCESS in row and row.get(EPISODES, 0) > 0]
    if evaluated:
        figures = " -> ".join(describe_success(row) for row in (
            evaluated[:1] if len(evaluated) == 1 else (evaluated[0], evaluated[-1])))
        lines = [f"{evaluation_header('validation')}: {figures}"]
    else:
        lines = ["evaluation: none logged (set evaluation.at_start / at_end / every_n_batches)"]
    for marker in sorted(output_dir.glob("*/*/best/best.json")) + sorted(
            output_dir.glob("*/best/best.json")):
        record = json.loads(marker.read_text(encoding="utf-8"))
        lines.append(f"best checkpoint: {marker.parent} {json.dumps(record)}")
    return lines


def end_of_run_report(output_dir: Path) -> str:
    lines = end_lines(output_dir)
    written = write_report(output_dir)
    page = write_run_page(output_dir, lines)
    curves = [path.name for path in written if path.suffix == ".png"]
    lines.append(f"curves: {output_dir / 'report'} ({', '.join(curves)}); "
                 f"first and last values: {output_dir / 'report' / 'summary.md'}")
    lines.append(f"run page (curves, episodes, checkpoints compared): {page}")
    return "\n".join(lines)
