"""A run's report: python -m src.report OUTPUT_DIR  ->  OUTPUT_DIR/report/*.png, summary.md

PNG learning curves of the logged metrics, and a markdown table of every metric's first
and last logged value (evaluation metrics, then the rest).

Runs side by side: python -m src.report --compare FOLDER OUTPUT_DIR OUTPUT_DIR ...  ->
FOLDER/<metric>.png, one line per run, for each metric of CURVES that any run logged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from src.report.curves import compare, write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dirs", type=Path, nargs="+", metavar="OUTPUT_DIR")
    parser.add_argument("--compare", type=Path, metavar="FOLDER",
                        help="draw the runs side by side into FOLDER")
    arguments = parser.parse_args()
    if arguments.compare is None and len(arguments.output_dirs) > 1:
        parser.error("several OUTPUT_DIRs are drawn side by side: give --compare FOLDER")
    written = (compare(arguments.output_dirs, arguments.compare) if arguments.compare
               else write_report(arguments.output_dirs[0]))
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
