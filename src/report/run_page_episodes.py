"""The run page's episodes and checkpoint comparisons, computed here for the page to show.

Episodes come from the evaluation files (OUTPUT_DIR/evaluation/[<split>/]step-N.jsonl) and
runs.jsonl, and from other runs' evaluation files to compare against. A message text is
kept once and referred to by its index: an evaluation asks the same prompts at every step,
a group asks each G times.

Comparisons pair two evaluations of a split sample by sample: the paired success and
reward differences with their bootstrap intervals (`paired_comparison`), and per category
each side's success with its Wilson interval (as `evaluation_table` prints it) and the
paired difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from src.maths.intervals import success_with_interval
from src.maths.spread import spread
from src.records.episode import EpisodeRecord, count_successes, counted_records
from src.report.evaluation_table import ALL
from src.report.paired_comparison import (
    REWARD,
    SUCCESS,
    PairedDifference,
    measure_of,
    paired_difference,
)
from src.storage.files import read_validated_json_lines
from src.storage.run_layout import EVALUATION_PREFIXES, RUNS_LOG, evaluation_file

TRAIN = "train"  # the source name of runs.jsonl's episodes
MAX_TRAIN_EPISODES = 20_000  # beyond this, whole batches are left out evenly
COMPARED_OF_THIS_RUN = 8  # evaluations of a split offered for comparison (all pairs)
COMPARED_OF_ANOTHER_RUN = 4
COLUMNS = ["source", "step", "sample_id", "group_index", "category", "status", "outcome",
           "reward", "turns", "prompt_tokens", "completion_tokens", "policy_version", "chat",
           "metrics", "error", "info"]


@dataclass
class Evaluation:
    """One evaluation file: its run's label ("" for the page's own run), split and step."""

    run: str
    split: str
    step: int
    records: list[EpisodeRecord]
    episodes: list[int] = field(default_factory=list)  # rows of the episode table

    @property
    def label(self) -> str:
        return f"{self.run + ' · ' if self.run else ''}{self.split} step {self.step}"


def evaluations_of(output_dir: Path, run: str = "") -> list[Evaluation]:
    """Every evaluation file of a run folder, by split then step."""
    found = []
    for split in EVALUATION_PREFIXES:
        folder = evaluation_file(output_dir, 0, split).parent
        for path in sorted(folder.glob("step-*.jsonl")):
            found.append(Evaluation(run, split, int(path.stem.removeprefix("step-")),
                                    [record for _, record in
                                     read_validated_json_lines(path, EpisodeRecord)]))
    return found


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities as None: JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


class EpisodeTable:
    """Episodes as rows of COLUMNS; each message as [role, index of its text]."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._indices: dict[str, int] = {}
        self.rows: list[list[Any]] = []

    def _text(self, content: str) -> int:
        index = self._indices.get(content)
        if index is None:
            index = self._indices[content] = len(self.strings)
            self.strings.append(content)
        return index

    def add(self, source: str, step: int, record: EpisodeRecord) -> int:
        chat = [[message.role.value, self._text(message.content)] for message in record.chat]
        self.rows.append([source, step, record.sample_id, record.group_index, record.category,
                          record.status.value, record.outcome.value, _finite(record.reward),
                          record.turns, record.prompt_tokens, record.completion_tokens,
                          record.policy_version, chat, _finite(record.metrics), record.error,
                          _finite(record.info)])
        return len(self.rows) - 1


def add_training_episodes(table: EpisodeTable, runs_file: Path) -> str | None:
    """runs.jsonl's episodes (step: their batch's, batch index + 1), whole batches evenly
    left out beyond MAX_TRAIN_EPISODES; a note saying how many are shown, if any exist."""
    if not runs_file.is_file():
        return None
    records = [record for _, record in read_validated_json_lines(runs_file, EpisodeRecord)]
    batches = sorted({record.batch_index for record in records})
    every = math.ceil(len(records) / MAX_TRAIN_EPISODES) if records else 1
    kept = set(batches[::-1][::every])  # counted back from the last batch: it is kept
    shown = [record for record in records if record.batch_index in kept]
    for record in shown:
        table.add(TRAIN, record.batch_index + 1, record)
    return (f"{TRAIN}: {len(shown)} of the {len(records)} episodes of runs.jsonl"
            + (f" (one batch in {every})" if every > 1 else ""))


def _success_cell(records: list[EpisodeRecord]) -> str:
    counted = counted_records(records)
    return success_with_interval(count_successes(counted), len(counted)) if counted else "-"


def _paired(before: dict[str, EpisodeRecord], after: dict[str, EpisodeRecord],
            measure_name: str) -> PairedDifference | None:
    measure = measure_of(measure_name)
    return paired_difference({s: measure(r) for s, r in before.items()},
                             {s: measure(after[s]) for s in before})


def _described(paired: PairedDifference | None) -> dict[str, Any] | None:
    if paired is None:
        return None
    return {"pairs": paired.pairs, "before": paired.before, "after": paired.after,
            "difference": str(paired.difference), "up": paired.up, "down": paired.down,
            "same": paired.same}


def compare(before: Evaluation, after: Evaluation) -> dict[str, Any]:
    """What the page shows of two evaluations of a split, over the samples in both."""
    before_samples = {record.sample_id: record for record in before.records}
    after_samples = {record.sample_id: record for record in after.records}
    common = sorted(set(before_samples) & set(after_samples))
    only_one = len(set(before_samples) ^ set(after_samples))
    before_common = {s: before_samples[s] for s in common}
    after_common = {s: after_samples[s] for s in common}
    overall = _paired(before_common, after_common, SUCCESS)  # a bootstrap: computed once
    categories = []
    for category in [*sorted({record.category for record in before_common.values()}), ALL]:
        ids = [s for s in common if category == ALL or before_common[s].category == category]
        paired = (overall if category == ALL
                  else _paired({s: before_common[s] for s in ids}, after_common, SUCCESS))
        categories.append({
            "category": category, "samples": len(ids),
            "before": _success_cell([before_common[s] for s in ids]),
            "after": _success_cell([after_common[s] for s in ids]),
            "difference": None if paired is None else str(paired.difference),
            "up": None if paired is None else paired.up,
            "down": None if paired is None else paired.down})
    return {"samples": len(common), "only_one_side": only_one,
            SUCCESS: _described(overall),
            REWARD: _described(_paired(before_common, after_common, REWARD)),
            "categories": categories}


def comparisons(evaluations: list[Evaluation]) -> dict[str, dict[str, Any]]:
    """Per split evaluated more than once: the evaluations offered (other runs' first, then
    this run's by step) and every pair of them, the earlier one `before`."""
    result = {}
    for split in dict.fromkeys(evaluation.split for evaluation in evaluations):
        own = [index for index, e in enumerate(evaluations) if e.split == split and not e.run]
        others = [index for index, e in enumerate(evaluations) if e.split == split and e.run]
        members = []
        for run in dict.fromkeys(evaluations[index].run for index in others):
            members += spread([i for i in others if evaluations[i].run == run],
                              COMPARED_OF_ANOTHER_RUN)
        members += spread(own, COMPARED_OF_THIS_RUN)
        if len(members) > 1:
            result[split] = {"members": members, "pairs": {
                f"{a}-{b}": compare(evaluations[a], evaluations[b])
                for position, a in enumerate(members) for b in members[position + 1:]}}
    return result


def episode_data(output_dir: Path, against: Sequence[Path] = ()) -> dict[str, Any]:
    """The page's episodes, evaluations and comparisons, as JSON-ready values."""
    evaluations = [evaluation for other in against
                   for evaluation in evaluations_of(other, other.name)]
    evaluations += evaluations_of(output_dir)
    table = EpisodeTable()
    for evaluation in evaluations:
        source = f"{evaluation.run} · {evaluation.split}" if evaluation.run else evaluation.split
        evaluation.episodes = [table.add(source, evaluation.step, record)
                               for record in evaluation.records]
    train_note = add_training_episodes(table, output_dir / RUNS_LOG)
    return {"columns": COLUMNS, "strings": table.strings, "episodes": table.rows,
            "notes": [train_note] if train_note else [],
            "evaluations": [{"label": e.label, "run": e.run, "split": e.split, "step": e.step,
                             "episodes": e.episodes} for e in evaluations],
            "comparisons": comparisons(evaluations)}
