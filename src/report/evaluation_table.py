"""Held-out results side by side, overall and per category, with 95% Wilson intervals:

    python -m src.report.evaluation_table LABEL=EVALUATION_JSONL [LABEL=EVALUATION_JSONL ...]

Each file is a run's evaluation episodes (OUTPUT_DIR/evaluation/step-N.jsonl). Prints a
markdown table: a row per category (a DB-bench skill, a math level) and one for all,
a column per file: success (outcome `correct`) and its interval; then the mean prompt
tokens per episode of each (what a method costs in context).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from src.records.episode import EpisodeRecord, Outcome
from src.report.run_end import success_with_interval
from src.storage.files import read_validated_json_lines

ALL = "all"


def evaluation_table(files: dict[str, Path]) -> str:
    runs = {label: [record for _, record in read_validated_json_lines(path, EpisodeRecord)]
            for label, path in files.items()}
    categories = sorted({record.category for records in runs.values() for record in records})
    lines = ["| category | " + " | ".join(runs) + " |",
             "| --- |" + " --- |" * len(runs)]
    for category in [*categories, ALL]:
        cells = []
        for records in runs.values():
            chosen = [r for r in records if category in (ALL, r.category)]
            wins = sum(record.outcome is Outcome.CORRECT for record in chosen)
            cells.append(success_with_interval(wins, len(chosen)) if chosen else "-")
        name = f"**{category}**" if category == ALL else category
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| mean prompt tokens per episode | " + " | ".join(
        f"{statistics.fmean(record.prompt_tokens for record in records):.0f}"
        for records in runs.values()) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="LABEL=EVALUATION_JSONL")
    arguments = parser.parse_args()
    files = {}
    for item in arguments.files:
        label, separator, path = item.partition("=")
        if not separator:
            parser.error(f"'{item}': give LABEL=EVALUATION_JSONL")
        files[label] = Path(path)
    print(evaluation_table(files))


if __name__ == "__main__":
    main()
