"""Compare two folders written by behaviour.sh: every file byte for byte, except the ones
that differ between any two processes, which are compared for what must stay equal:
metrics rows, summary.json and the end-of-run table without their wall-clock keys,
rng_state.pt's torch generator, checksums.json without rng_state.pt's entry, run_state.json and trackers.json without the
byte counts of metrics.jsonl (whose wall-clock figures vary in length), the dry runs'
output without its timestamped log lines. TensorBoard's event files and the run page
(wall-clock stamps and figures) and the commands' logs are left out."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
import yaml

from src.training.safe_load import load_plain

WALL_CLOCK = ("time/", "agent_tokens_per_s", "seconds", "_per_s")


def _rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]
    return [{key: value for key, value in row.items()
             if not any(mark in key for mark in WALL_CLOCK)} for row in rows]


def _without_wall_clock(value: object) -> object:
    """`value` without wall-clock figures, nor the checksum of rng_state.pt."""
    if isinstance(value, dict):
        return {key: _without_wall_clock(item) for key, item in value.items()
                if key != "rng_state.pt" and not any(mark in key for mark in WALL_CLOCK)}
    return value


def _without_modules(value: object) -> object:
    if isinstance(value, dict):
        return {key: _without_modules(item) for key, item in value.items() if key != "module"}
    if isinstance(value, list):
        return [_without_modules(item) for item in value]
    return value


def _same(left: Path, right: Path) -> bool:
    if left.read_bytes() == right.read_bytes():
        return True
    if left.name == "metrics.jsonl":
        return _rows(left) == _rows(right)
    if left.name == "rng_state.pt":
        a, b = (load_plain(p) for p in (left, right))  # tensors and numbers, no code
        return "torch" in a and torch.equal(a["torch"], b["torch"])
    if left.name in ("run_state.json", "trackers.json"):
        a, b = (json.loads(p.read_text()) for p in (left, right))
        for record in (a, b):
            for key in [key for key in record if "metrics" in key]:
                record.pop(key)
        return a == b
    if left.parent.name == "dry_run":
        a, b = ([line for line in p.read_text().splitlines()
                 if not re.match(r"\d{4}-\d\d-\d\d ", line)] for p in (left, right))
        return a == b
    if left.name == "config.yaml":
        # the resolved config names its own output_dir; components named by a short name
        # have no `module`
        a, b = (_without_modules(yaml.safe_load(p.read_text().replace(str(root), "ROOT")))
                for p, root in ((left, left.parents[1]), (right, right.parents[1])))
        return a == b
    if left.name in ("checksums.json", "summary.json"):
        a, b = (_without_wall_clock(json.loads(p.read_text())) for p in (left, right))
        return a == b
    if left.name == "summary.md":  # the end-of-run table of first and last values
        a, b = ([line for line in p.read_text().splitlines()
                 if not any(mark in line for mark in WALL_CLOCK)] for p in (left, right))
        return a == b
    return False


def main(before: Path, after: Path) -> int:
    skip = {".log"}
    names = sorted({p.relative_to(before) for p in before.rglob("*") if p.is_file()}
                   | {p.relative_to(after) for p in after.rglob("*") if p.is_file()})
    differ = []
    for name in names:
        # TensorBoard's events and the run page embed wall-clock stamps and figures
        if (name.suffix in skip or name.parts[0] == "configs" or "tfevents" in name.name
                or name.name == "run.html"):
            continue
        left, right = before / name, after / name
        if not left.is_file() or not right.is_file():
            differ.append(f"only in {'after' if right.is_file() else 'before'}: {name}")
        elif not _same(left, right):
            differ.append(f"differs: {name}")
    print(f"{len(names)} files compared; {len(differ)} differ")
    print("\n".join(differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
