"""How many batches of a finished online RL run had nothing to learn: every group's task
returns equal, so every group-relative advantage (grpo, dr_grpo, rloo) is exactly 0 and,
with no entropy bonus and no KL reference, the learner steps without a forward.

Read from the run folder's runs.jsonl (each episode's batch, sample and reward; an
episode that failed or wrote nothing is left out, as the trainer leaves it out), and, where the run logged it, checked
against the trainer's own `update_skipped` in metrics.jsonl:

    python -m experiments.update_skipping.count_zero_batches RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from src.records.episode import EpisodeStatus


def zero_batches(run: Path) -> tuple[int, list[int]]:
    """The run's batch count and the indices of its batches whose groups all have one
    reward each."""
    rewards: dict[int, dict[str, set[float]]] = defaultdict(lambda: defaultdict(set))
    for line in jsonl_lines(run / "runs.jsonl"):
        record = json.loads(line)
        if not EpisodeStatus(record["status"]).failed and record["completion_tokens"]:
            rewards[record["batch_index"]][record["sample_id"]].add(record["reward"])
    flat = [batch for batch, groups in sorted(rewards.items())
            if all(len(group) == 1 for group in groups.values())]
    return len(rewards), flat


def jsonl_lines(path: Path) -> list[str]:
    """The file's lines, split at newlines only (a reply may hold U+2028, at which
    str.splitlines also splits)."""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def logged_skips(run: Path) -> list[int] | None:
    """The batches (0-based) whose trainer logged `update_skipped` > 0; None if it never
    logged the figure."""
    rows = [json.loads(line) for line in jsonl_lines(run / "metrics.jsonl")]
    if not any("update_skipped" in row for row in rows):
        return None
    return [row["step"] - 1 for row in rows if row.get("update_skipped", 0) > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path)
    for run in parser.parse_args().runs:
        total, flat = zero_batches(run)
        logged = logged_skips(run)
        print(f"{run}: {len(flat)} of {total} batches with every advantage 0 {flat}; "
              f"the trainer logged update_skipped at "
              f"{'(not logged)' if logged is None else logged}")


if __name__ == "__main__":
    main()
