"""The seed's table, computed from evaluation episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from src.tasks.instance.econ.decision_table import decision_statistics, decision_table


def episode(reward: float, work: float | None = None, consumption: float = 0.0,
            vs_rule: float = 0.0) -> dict:
    parsed = work is not None
    info: dict = {"metric/json_parse_success": float(parsed)}
    if parsed:
        info["econ/decisions"] = [{"household": 0, "work": work, "consumption": consumption}]
        info["metric/reward_vs_rule"] = vs_rule
    return {"reward": reward, "info": info}


def test_statistics_by_hand() -> None:
    stats = decision_statistics([episode(0.5, 1.0, 0.2, -0.1), episode(0.7, 0.0, 0.4, 0.05),
                                 episode(-1.0), episode(-1.0)])
    assert stats["JSON parse success"] == 0.5
    assert stats["share of reward -1.0"] == 0.5
    assert stats["std of work"] == pytest.approx(0.70711, abs=1e-5)  # stdev of (1, 0)
    assert stats["std of consumption"] == pytest.approx(0.14142, abs=1e-5)
    assert stats["mean reward"] == pytest.approx(-0.2)
    assert stats["mean reward (parsed)"] == pytest.approx(0.6)
    assert stats["rule policy (same states)"] == pytest.approx((0.6 + 0.65) / 2)


def test_table_compares_first_and_last_evaluation(tmp_path: Path) -> None:
    folder = tmp_path / "evaluation"
    folder.mkdir()
    for step, rows in ((0, [episode(-1.0), episode(0.5, 1.0, 0.5)]),
                       (40, [episode(0.6, 1.0, 0.4), episode(0.8, 0.0, 0.6)])):
        (folder / f"step-{step:06d}.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows))
    lines = decision_table(tmp_path).splitlines()
    assert lines[2].startswith("| first: step-000000, 2 episodes | 0.500 | 0.500 |")
    assert lines[3].startswith("| last: step-000040, 2 episodes | 1.000 | 0.000 |")
    with pytest.raises(FileNotFoundError, match="at least two evaluations"):
        decision_table(tmp_path / "none")
