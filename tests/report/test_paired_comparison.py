"""Two evaluations compared sample by sample: paired differences and bootstrap intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from src.records.chat import ChatMessage
from src.records.episode import EpisodeRecord
from src.report.paired_comparison import paired_comparison, single_mean


def write(path: Path, episodes: list[tuple[str, str, float, dict[str, float]]]) -> Path:
    """Episodes as (sample id, outcome, reward, metrics)."""
    rows = [EpisodeRecord(sample_id=sample_id, group_index=0, batch_index=0, category="c",
                          status="completed", outcome=outcome, reward=reward, turns=1,
                          prompt_tokens=1, completion_tokens=1,
                          chat=[ChatMessage(role="user", content="q")], metrics=metrics)
            for sample_id, outcome, reward, metrics in episodes]
    path.write_text("".join(json.dumps(row.model_dump(mode="json")) + "\n" for row in rows))
    return path


def test_success_pairs_by_sample_id_whatever_the_order(tmp_path: Path) -> None:
    before = write(tmp_path / "before.jsonl", [("a", "incorrect", 0, {}), ("b", "correct", 1, {}),
                                               ("c", "incorrect", 0, {}), ("d", "correct", 1, {})])
    after = write(tmp_path / "after.jsonl", [("d", "correct", 1, {}), ("c", "correct", 1, {}),
                                             ("b", "incorrect", 0, {}), ("a", "correct", 1, {})])
    text = paired_comparison(before, after)
    assert "4 pairs (0 samples without it on a side)" in text
    assert "before 50, after 75" in text
    assert "difference (after - before) +25 [" in text
    assert "up 2, down 1, same 1" in text


def test_a_metric_measure_leaves_out_samples_that_lack_it(tmp_path: Path) -> None:
    key = "reward_vs_rule"
    before = write(tmp_path / "before.jsonl", [("a", "incorrect", 0.8, {key: -0.01}),
                                               ("b", "incorrect", -1.0, {}),
                                               ("c", "incorrect", 0.8, {key: -0.03})])
    after = write(tmp_path / "after.jsonl", [("a", "incorrect", 0.8, {key: 0.0}),
                                             ("b", "incorrect", 0.8, {key: 0.0}),
                                             ("c", "incorrect", 0.8, {key: -0.01})])
    text = paired_comparison(before, after, key)
    assert "2 pairs (1 samples without it on a side)" in text
    assert "before -0.02, after -0.005" in text
    assert "difference (after - before) +0.015 [+0.01, +0.02]" in text
    assert single_mean(after, key).startswith(f"{key}, 3 samples with it: mean -0.003333 [")


def test_bad_input_is_a_named_error(tmp_path: Path) -> None:
    one = write(tmp_path / "one.jsonl", [("a", "correct", 1, {}), ("b", "correct", 1, {})])
    other = write(tmp_path / "other.jsonl", [("a", "correct", 1, {}), ("z", "correct", 1, {})])
    with pytest.raises(ValueError, match=r"evaluate different samples \(2 in one only, such as b\)"):
        paired_comparison(one, other)
    twice = write(tmp_path / "twice.jsonl", [("a", "correct", 1, {}), ("a", "correct", 1, {})])
    with pytest.raises(ValueError, match=r"twice.jsonl:2: sample a appears twice"):
        single_mean(twice)
    with pytest.raises(ValueError, match="0 samples have x on both sides"):
        paired_comparison(one, one, "x")
    with pytest.raises(ValueError, match=r"one\.jsonl: 0 samples have x"):
        single_mean(one, "x")
