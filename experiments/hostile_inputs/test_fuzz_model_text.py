"""The study tool: mutations stay bounded, and a short run writes its counts."""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

from experiments.hostile_inputs.fuzz_model_text import MAX_MUTATED_CHARS, main, mutate


def test_mutations_stay_within_their_bound_all_along() -> None:
    # repeats of repeats, cut only at the end, once took 21 GB on the way
    rng = random.Random(0)
    tracemalloc.start()
    try:
        longest = max(len(mutate(rng, "7")) for _ in range(500))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert longest <= MAX_MUTATED_CHARS and peak < 100 * 2**20


def test_a_short_run_counts_the_tool_call_parser(tmp_path: Path) -> None:
    output = tmp_path / "fuzz.json"
    assert main(["--tries", "20", "--targets", "tool_calls", "--output", str(output)]) == 0
    (target,) = json.loads(output.read_text())["targets"]
    assert target["target"] == "tool-call parser" and target["tries"] > 20
    assert target["crashes"] == target["unscored"] == target["bounds_exceeded"] == 0
