"""The scorer study tool: a short run counts its targets, and the study sees a scorer's
overrun and code that a scorer ran from a reply."""

from __future__ import annotations

import json
import math
from pathlib import Path

from experiments.hostile_inputs.fuzz_scorers import (
    BOMBS,
    CallWatch,
    ScorerTally,
    main,
    step_all,
    watching,
    with_marker,
)
from src.tasks.adapters.reasoning_gym.task import ReasoningGymTask
from src.tasks.splits import SplitsWithSelection


def test_a_short_run_counts_a_dataset_scorer_and_a_game(tmp_path: Path) -> None:
    output = tmp_path / "fuzz.json"
    assert main(["--tries", "3", "--targets", "reasoning_gym,textarena", "--datasets",
                 "chain_sum", "--games", "Countdown-v0", "--output", str(output)]) == 0
    targets = {t["target"]: t for t in json.loads(output.read_text())["targets"]}
    assert set(targets) == {"reasoning-gym chain_sum", "textarena Countdown-v0"}
    # the fixed replies and the bombs, then the mutated ones, each scored in the worker
    scorer = targets["reasoning-gym chain_sum"]
    assert scorer["tries"] > len(BOMBS) and scorer["bounded_calls"] == 2 * scorer["tries"]
    assert all(t["crashes"] == t["unscored"] == t["bounds_exceeded"] == t["code_runs"] == 0
               for t in targets.values())


def test_the_study_counts_an_overrun_and_code_a_scorer_ran(tmp_path: Path) -> None:
    # countdown's scorer reads the answer with sympy's parse_expr, which evaluates Python
    family = ReasoningGymTask("countdown",
                              splits=SplitsWithSelection(num_train=1, num_validation=1),
                              scorer_timeout_s=1.0)
    marker = tmp_path / "code_ran"
    replies = [with_marker(BOMBS[name], marker)
               for name in ("boxed python_import", "boxed python_tower", "boxed digits_1999")]
    with CallWatch() as watch, watching(watch, ScorerTally("countdown")) as tally:
        try:
            step_all(tally, family, replies, lambda _: "", 0, math.inf, marker)
        finally:
            family.close()
    assert tally.tries == 3 and tally.bounded_calls == 6
    assert tally.code_runs == 1 and tally.scorer_timeouts == 1
    assert tally.crashes == tally.unscored == tally.bounds_exceeded == 0
    assert not marker.exists()  # counted once, then removed


def test_bombs_reach_the_scorer_or_are_cut_as_the_task_cuts_them() -> None:
    # under the task's 2,000 characters an answer is scored; over it, wrong unread
    from src.tasks.answers import MAX_ANSWER_CHARS, final_answer

    lengths = {name: len(final_answer(text, "answer_tag" if name.startswith("answer")
                                      else "boxed") or "")
               for name, text in BOMBS.items()}
    assert lengths["boxed python_tower"] == len("9**9**9**9")
    assert sum(length <= MAX_ANSWER_CHARS for length in lengths.values()) > 30
    assert lengths["boxed megabyte_sum"] > MAX_ANSWER_CHARS
