"""Two evaluations of the same held-out samples, compared sample by sample:

    python -m src.report.paired_comparison BEFORE_JSONL [AFTER_JSONL] [--measure MEASURE]

Each file is a run's evaluation episodes (OUTPUT_DIR/evaluation/step-N.jsonl). MEASURE is
`success` (1 for outcome `correct`, else 0; the default), `reward`, or a key of the
episodes' info (econ's `metric/reward_vs_rule`: a parsed reply's reward less the rule
policy's on the same state; replies that did not parse carry none). Episodes pair by
sample id; a sample without the measure on either side is left out, and counted.

Prints each side's mean, the mean difference (after - before) with its 95% bootstrap
interval (10,000 resamples of the pairs, percentile, fixed seed), and how many pairs went
up, down or stayed. With one file, the mean of its measure and that mean's interval (for
`metric/reward_vs_rule`: above 0 is above the rule policy). Success is in percentage points.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

from src.maths.intervals import mean_with_interval
from src.records.episode import EpisodeRecord, count_successes
from src.storage.files import read_validated_json_lines

SUCCESS = "success"
REWARD = "reward"


def measure_of(name: str) -> Callable[[EpisodeRecord], float | None]:
    """The per-episode number a measure name stands for; None where the episode has none."""
    if name == SUCCESS:
        return lambda record: 100.0 * count_successes([record])
    if name == REWARD:
        return lambda record: record.reward

    def info_value(record: EpisodeRecord) -> float | None:
        value = record.info.get(name)
        return None if value is None else float(value)
    return info_value


def measures_by_sample(path: Path, measure: Callable[[EpisodeRecord], float | None]
                       ) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for number, record in read_validated_json_lines(path, EpisodeRecord):
        if record.sample_id in values:
            raise ValueError(f"{path}:{number}: sample {record.sample_id} appears twice; "
                             "an evaluation has one episode a sample")
        values[record.sample_id] = measure(record)
    return values


def paired_comparison(before: Path, after: Path, measure_name: str = SUCCESS) -> str:
    measure = measure_of(measure_name)
    before_values = measures_by_sample(before, measure)
    after_values = measures_by_sample(after, measure)
    if set(before_values) != set(after_values):
        only = sorted(set(before_values) ^ set(after_values))
        raise ValueError(f"{before} and {after} evaluate different samples "
                         f"({len(only)} in one only, such as {only[0]})")
    pairs = [(before_values[s], after_values[s]) for s in sorted(before_values)
             if before_values[s] is not None and after_values[s] is not None]
    if len(pairs) < 2:
        raise ValueError(f"{before} and {after}: {len(pairs)} samples have {measure_name} "
                         "on both sides, an interval needs at least 2")
    left_out = len(before_values) - len(pairs)
    differences = [b_after - b_before for b_before, b_after in pairs]
    return (f"{measure_name}, {len(pairs)} pairs ({left_out} samples without it on a side):\n"
            f"  before {statistics.fmean(p[0] for p in pairs):.4g}, "
            f"after {statistics.fmean(p[1] for p in pairs):.4g}\n"
            f"  difference (after - before) {mean_with_interval(differences)} "
            f"(95% bootstrap)\n"
            f"  up {sum(d > 0 for d in differences)}, down {sum(d < 0 for d in differences)}, "
            f"same {sum(d == 0 for d in differences)}\n")


def single_mean(path: Path, measure_name: str = SUCCESS) -> str:
    values = [v for v in measures_by_sample(path, measure_of(measure_name)).values()
              if v is not None]
    if len(values) < 2:
        raise ValueError(f"{path}: {len(values)} samples have {measure_name}, an interval "
                         "needs at least 2")
    return (f"{measure_name}, {len(values)} samples with it: mean "
            f"{mean_with_interval(values)} (95% bootstrap)\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, metavar="BEFORE_JSONL")
    parser.add_argument("after", type=Path, nargs="?", metavar="AFTER_JSONL")
    parser.add_argument("--measure", default=SUCCESS,
                        help="success, reward, or a key of the episodes' info")
    arguments = parser.parse_args()
    print(single_mean(arguments.before, arguments.measure) if arguments.after is None
          else paired_comparison(arguments.before, arguments.after, arguments.measure), end="")


if __name__ == "__main__":
    main()
