from __future__ import annotations

import json
from pathlib import Path

from src.report.run_end import end_of_run_report


def write_run(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_first_and_last_evaluation_with_wilson_intervals_best_and_curves(tmp_path: Path) -> None:
    write_run(tmp_path, [
        {"step": 0, "eval/success_rate": 3 / 64, "eval/episodes": 64.0, "eval/reward": 0.1},
        {"step": 1, "rollout/reward": 0.2, "rollout/success_rate": 0.25},
        {"step": 20, "eval/success_rate": 60 / 64, "eval/episodes": 64.0, "eval/reward": 0.9,
         "rollout/reward": 0.8, "rollout/success_rate": 0.75},
    ])
    best = tmp_path / "callback_state" / "rl_training" / "best"
    best.mkdir(parents=True)
    (best / "best.json").write_text(json.dumps({"metric": "reward", "value": 0.8, "step": 20}))

    lines = end_of_run_report(tmp_path).splitlines()

    # Wilson 95%: 3/64 -> [1.61%, 12.90%], 60/64 -> [85.00%, 97.54%] (by hand and in R's
    # binom::binom.wilson)
    assert lines[0].endswith("4.7% [1.6, 12.9] (3/64) at step 0 -> "
                             "93.8% [85.0, 97.5] (60/64) at step 20")
    assert lines[1] == (f"best checkpoint: {best} "
                        '{"metric": "reward", "value": 0.8, "step": 20}')
    assert lines[2].startswith(f"curves: {tmp_path / 'report'} (")
    assert "success.png" in lines[2] and (tmp_path / "report" / "success.png").is_file()
    assert (tmp_path / "report" / "summary.md").is_file()
    assert lines[3] == ("run page (curves, episodes, checkpoints compared): "
                        f"{tmp_path / 'report' / 'run.html'}")
    assert (tmp_path / "report" / "run.html").is_file()


def test_a_run_without_evaluation_says_how_to_get_one(tmp_path: Path) -> None:
    write_run(tmp_path, [{"step": 1, "rollout/reward": 0.2}])
    assert end_of_run_report(tmp_path).splitlines()[0].startswith(
        "evaluation: none logged (set evaluation.at_start")
