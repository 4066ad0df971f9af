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
from collections.abc import Callable, Sequence
from pathlib import Path

from src.maths.intervals import success_with_interval
from src.records.episode import EpisodeRecord, count_successes, counted_records
from src.storage.files import read_validated_json_lines

ALL = "all"


def read_runs(files: dict[str, Path]) -> dict[str, list[EpisodeRecord]]:
    return {label: [record for _, record in read_validated_json_lines(path, EpisodeRecord)]
            for label, path in files.items()}


def success_table(runs: dict[str, list[EpisodeRecord]],
                  rows: dict[str, Callable[[EpisodeRecord], bool]],
                  first_column: str = "category") -> list[str]:
    """Markdown lines: a row per named selection of episodes, a column per run, each cell
    the selection's success with its interval ("-" where it selects nothing)."""
    lines = [f"| {first_column} | " + " | ".join(runs) + " |",
             "| --- |" + " --- |" * len(runs)]
    for name, selects in rows.items():
        cells = []
        for records in runs.values():
            chosen = [record for record in counted_records(records) if selects(record)]
            wins = count_successes(chosen)
            cells.append(success_with_interval(wins, len(chosen)) if chosen else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def evaluation_table(files: dict[str, Path]) -> str:
    runs = read_runs(files)
    categories = sorted({record.category for records in runs.values() for record in records})
    rows: dict[str, Callable[[EpisodeRecord], bool]] = {
        category: (lambda record, category=category: record.category == category)
        for category in categories}
    rows[f"**{ALL}**"] = lambda record: True
    lines = success_table(runs, rows)
    lines.append("| mean prompt tokens per episode | " + " | ".join(
        f"{statistics.fmean(record.prompt_tokens for record in records):.0f}"
        for records in runs.values()) + " |")
    return "\n".join(lines)


def labelled_files(parser: argparse.ArgumentParser, items: Sequence[str]) -> dict[str, Path]:
    """LABEL=PATH arguments as {label: path}; a malformed one is a usage error."""
    files = {}
    for item in items:
        label, separator, path = item.partition("=")
        if not separator:
            parser.error(f"'{item}': give LABEL=EVALUATION_JSONL")
        files[label] = Path(path)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="LABEL=EVALUATION_JSONL")
    print(evaluation_table(labelled_files(parser, parser.parse_args().files)))


if __name__ == "__main__":
    main()
