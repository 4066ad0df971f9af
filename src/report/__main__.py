"""A run's report: python -m src.report OUTPUT_DIR  ->  OUTPUT_DIR/report/*.png, summary.md,
run.html

PNG learning curves of the logged metrics, a markdown table of every metric's first and
last logged value (evaluation metrics, then the rest), and the run page: one HTML file
that opens offline, with the curves, the end-of-run lines, an episode browser over the
evaluation files and runs.jsonl, and two evaluations compared problem by problem.
`--against OTHER_DIR` (repeatable) adds another run's evaluations to compare with (an SFT
start against this RL run's checkpoints).

Runs side by side: python -m src.report --compare FOLDER OUTPUT_DIR OUTPUT_DIR ...  ->
FOLDER/<metric>.png, one line per run, for each metric of CURVES that any run logged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from src.report.curves import compare, write_report
from src.report.run_end import end_lines
from src.report.run_page import write_run_page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dirs", type=Path, nargs="+", metavar="OUTPUT_DIR")
    parser.add_argument("--compare", type=Path, metavar="FOLDER",
                        help="draw the runs side by side into FOLDER")
    parser.add_argument("--against", type=Path, action="append", default=[],
                        metavar="OTHER_DIR",
                        help="another run whose evaluations the run page compares with")
    arguments = parser.parse_args()
    if arguments.compare is None and len(arguments.output_dirs) > 1:
        parser.error("several OUTPUT_DIRs are drawn side by side: give --compare FOLDER")
    if arguments.compare is not None and arguments.against:
        parser.error("--against belongs to one run's page, not to --compare")
    if arguments.compare is not None:
        written = compare(arguments.output_dirs, arguments.compare)
    else:
        output_dir = arguments.output_dirs[0]
        written = [*write_report(output_dir),
                   write_run_page(output_dir, end_lines(output_dir), arguments.against)]
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
