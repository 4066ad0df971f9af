"""A run of an environment adapter's recipe as a summary JSON for docs/results/summaries/.

python -m experiments.environment_adapters.summary RUN_DIR --what TEXT --command TEXT \
    --commit HASH --wall TEXT --measures won,game_reward --out docs/results/summaries/X.json

Held-out success at each evaluated step with its Wilson interval, the evaluation metrics
the run logged, and the paired comparisons of the first and last evaluation (success and
each extra measure) as `src.report.paired_comparison` prints them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from src.maths.intervals import success_with_interval
from src.records.episode import EpisodeRecord, count_successes
from src.report.paired_comparison import paired_comparison


def summary(run: Path, what: str, command: str, commit: str, wall: str,
            measures: list[str]) -> dict[str, object]:
    files = sorted((run / "evaluation").glob("step-*.jsonl"))
    validation: dict[str, str] = {}
    for path in files:
        records = [EpisodeRecord.model_validate_json(line) for line in path.open()]
        step = int(path.stem.split("-")[1])
        validation[f"step {step}"] = success_with_interval(count_successes(records),
                                                           len(records))
    evaluations = [{key: value for key, value in json.loads(line).items()
                    if key == "step" or key.startswith("eval/")}
                   for line in (run / "metrics.jsonl").open() if '"eval/' in line]
    paired = {measure: paired_comparison(files[0], files[-1], measure).strip()
              for measure in ["success", *measures]}
    return {"what": what, "command": command, "commit": commit, "wall": wall,
            "validation_success": validation, "paired_first_last": paired,
            "evaluations": evaluations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    for name in ("--what", "--command", "--commit", "--wall"):
        parser.add_argument(name, required=True)
    parser.add_argument("--measures", default="", help="comma-separated metric names")
    parser.add_argument("--out", type=Path, required=True)
    arguments = parser.parse_args()
    measures = [name for name in arguments.measures.split(",") if name]
    result = summary(arguments.run, arguments.what, arguments.command, arguments.commit,
                     arguments.wall, measures)
    arguments.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
