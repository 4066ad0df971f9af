from __future__ import annotations

import json
from pathlib import Path

import pytest

from src.report.curves import compare, plot, write_report


def test_report_writes_a_png_per_logged_curve(tmp_path: Path) -> None:
    rows = [{"step": 0, "eval/reward": 0.1},
            {"step": 1, "rollout/reward": 0.2, "rollout/success_rate": 0.1, "kl": 0.01},
            {"step": 2, "rollout/reward": 0.4, "rollout/success_rate": 0.3, "kl": 0.02}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    written = sorted(path.name for path in plot(tmp_path))
    assert written == ["kl.png", "reward.png", "success.png"]
    assert all((tmp_path / "report" / name).read_bytes()[:4] == b"\x89PNG" for name in written)


def test_report_without_metrics_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        plot(tmp_path)


def test_summary_table_has_first_and_last_values(tmp_path: Path) -> None:
    rows = [{"step": 0, "eval/accuracy": 0.1}, {"step": 1, "reward": 0.2},
            {"step": 2, "reward": 0.4, "eval/accuracy": 0.9}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    written = write_report(tmp_path)
    table = (tmp_path / "report" / "summary.md").read_text()
    assert written[-1].name == "summary.md"
    assert "| eval/accuracy | 0.1 (0) | 0.9 (2) |" in table
    assert "| reward | 0.2 (1) | 0.4 (2) |" in table
    assert table.index("eval/accuracy") < table.index("| reward")


def test_compare_draws_one_line_per_run(tmp_path: Path) -> None:
    for name, accuracy in (("grpo", 0.9), ("gspo", 0.8)):
        (tmp_path / name).mkdir()
        rows = [{"step": 0, "eval/success_rate": 0.1},
                {"step": 1, "rollout/reward": 0.2}, {"step": 2, "eval/success_rate": accuracy}]
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows))
    written = compare([tmp_path / "grpo", tmp_path / "gspo"], tmp_path / "side_by_side")
    assert sorted(path.name for path in written) == ["eval_success_rate.png",
                                                     "rollout_reward.png"]
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in written)
