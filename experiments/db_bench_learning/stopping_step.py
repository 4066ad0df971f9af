"""The stopping step chosen on the selection split, and the validation figure it stands for:

    python -m experiments.db_bench_learning.stopping_step OUTPUT_DIR

For a run that evaluated both held-out splits (`evaluation.splits: [selection,
validation]`), prints a markdown table with a row per evaluated step: success on the
selection problems and on the validation problems, each with its 95% Wilson interval.
The chosen step is the one with the most selection successes, the earliest among equals
(step 0, where the run evaluated its start, included: training may not have helped). Its
validation figure is the run's held-out result; the validation figures of the other
steps played no part in the choice.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from src.records.episode import EpisodeRecord, count_successes
from src.report.run_end import success_with_interval
from src.run.evaluation import evaluation_file
from src.storage.files import read_validated_json_lines


def _successes(path: Path) -> tuple[int, int] | None:
    """(successes, episodes) of an evaluation file; None where the file is absent."""
    if not path.is_file():
        return None
    records = [record for _, record in read_validated_json_lines(path, EpisodeRecord)]
    return count_successes(records), len(records)


def evaluated_steps(output_dir: Path) -> list[int]:
    """The steps with a selection evaluation, in order."""
    folder = evaluation_file(output_dir, 0, "selection").parent
    return sorted(int(path.stem.removeprefix("step-")) for path in folder.glob("step-*.jsonl"))


def chosen_step(selection: dict[int, tuple[int, int]]) -> int:
    """The step with the highest selection success rate, the earliest among equals."""
    return min(selection, key=lambda step: (-selection[step][0] / selection[step][1], step))


def stopping_step_table(output_dir: Path) -> str:
    steps = evaluated_steps(output_dir)
    if not steps:
        raise ValueError(f"{output_dir}: no selection evaluations (evaluation/selection/"
                         "step-N.jsonl); evaluate with evaluation.splits: [selection, validation]")
    selection = {step: counts for step in steps
                 if (counts := _successes(evaluation_file(output_dir, step, "selection")))}
    validation = {step: _successes(evaluation_file(output_dir, step)) for step in steps}
    choice = chosen_step(selection)

    def cell(counts: tuple[int, int] | None) -> str:
        return success_with_interval(*counts) if counts else "not evaluated"

    lines = ["| step | selection | validation |", "| --- | --- | --- |"]
    for step in steps:
        mark = " (chosen)" if step == choice else ""
        lines.append(f"| {step}{mark} | {cell(selection[step])} | {cell(validation[step])} |")
    lines += ["", f"chosen step {choice}: validation {cell(validation[choice])}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path)
    print(stopping_step_table(parser.parse_args().output_dir))


if __name__ == "__main__":
    main()
