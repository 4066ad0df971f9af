"""Two evaluations of the same held-out samples, compared sample by sample:

    python -m src.report.paired_comparison BEFORE_JSONL [AFTER_JSONL] [--measure MEASURE]

Each file is a run's evaluation episodes (OUTPUT_DIR/evaluation/step-N.jsonl). MEASURE is
`success` (1 for outcome `correct`, else 0; the default), `reward`, or the name of one of
the episodes' metrics (econ's `reward_vs_rule`: a parsed reply's reward less the rule
policy's on the same state; replies that did not parse carry none). Episodes pair by
sample id; a sample without the measure on either side is left out, and counted.

Prints each side's mean, the mean difference (after - before) with its 95% bootstrap
interval (10,000 resamples of the pairs, percentile, fixed seed), and how many pairs went
up, down or stayed. With one file, the mean of its measure and that mean's interval (for
`reward_vs_rule`: above 0 is above the rule policy). Success is in percentage points.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from src.maths.intervals import MeanInterval, mean_with_interval
from src.records.episode import EpisodeRecord, count_successes
from src.storage.files import read_validated_json_lines

SUCCESS = "success"
REWARD = "reward"


def measure_of(name: str) -> Callable[[EpisodeRecord], float | None]:
    """The per-episode number a measure name stands for; None where the episode has none."""
    if name == SUCCESS:  # none where the episode counts in no success rate
        return lambda record: (100.0 * count_successes([record]) if record.status.counted
                               else None)
    if name == REWARD:
        return lambda record: record.reward
    return lambda record: record.metrics.get(name)


def measures_by_sample(path: Path, measure: Callable[[EpisodeRecord], float | None]
                       ) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for number, record in read_validated_json_lines(path, EpisodeRecord):
        if record.sample_id in values:
            raise ValueError(f"{path}:{number}: sample {record.sample_id} appears twice; "
                             "an evaluation has one episode a sample")
        values[record.sample_id] = measure(record)
    return values


@dataclass(frozen=True)
class PairedDifference:
    """A measure on the same samples before and after, over the samples with it on both."""

    pairs: int
    left_out: int  # samples without the measure on a side
    before: float  # the means over the pairs
    after: float
    difference: MeanInterval  # after - before, 95% bootstrap
    up: int
    down: int
    same: int


def paired_difference(before: dict[str, float | None], after: dict[str, float | None]
                      ) -> PairedDifference | None:
    """The samples of `before` paired with `after`'s (which holds them all); None where
    fewer than 2 have the measure on both sides, too few for an interval."""
    pairs = [(before[s], after[s]) for s in sorted(before)
             if before[s] is not None and after[s] is not None]
    if len(pairs) < 2:
        return None
    differences = [b_after - b_before for b_before, b_after in pairs]
    return PairedDifference(
        len(pairs), len(before) - len(pairs), statistics.fmean(p[0] for p in pairs),
        statistics.fmean(p[1] for p in pairs), mean_with_interval(differences),
        sum(d > 0 for d in differences), sum(d < 0 for d in differences),
        sum(d == 0 for d in differences))


def paired_comparison(before: Path, after: Path, measure_name: str = SUCCESS) -> str:
    measure = measure_of(measure_name)
    before_values = measures_by_sample(before, measure)
    after_values = measures_by_sample(after, measure)
    if set(before_values) != set(after_values):
        only = sorted(set(before_values) ^ set(after_values))
        raise ValueError(f"{before} and {after} evaluate different samples "
                         f"({len(only)} in one only, such as {only[0]})")
    paired = paired_difference(before_values, after_values)
    if paired is None:
        having = sum(before_values[s] is not None and after_values[s] is not None
                     for s in before_values)
        raise ValueError(f"{before} and {after}: {having} samples have {measure_name} "
                         "on both sides, an interval needs at least 2")
    return (f"{measure_name}, {paired.pairs} pairs ({paired.left_out} samples without it on "
            f"a side):\n"
            f"  before {paired.before:.4g}, after {paired.after:.4g}\n"
            f"  difference (after - before) {paired.difference} (95% bootstrap)\n"
            f"  up {paired.up}, down {paired.down}, same {paired.same}\n")


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
                        help="success, reward, or the name of an episode metric")
    arguments = parser.parse_args()
    print(single_mean(arguments.before, arguments.measure) if arguments.after is None
          else paired_comparison(arguments.before, arguments.after, arguments.measure), end="")


if __name__ == "__main__":
    main()
