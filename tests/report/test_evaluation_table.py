"""The side-by-side held-out table: per category and overall, Wilson intervals, prompt cost."""

from __future__ import annotations

import json
from pathlib import Path

from src.records.chat import ChatMessage
from src.records.episode import EpisodeRecord
from src.report.evaluation_table import evaluation_table


def write(path: Path, outcomes: list[tuple[str, str, int]]) -> Path:
    rows = [EpisodeRecord(sample_id=f"validation-{index:06d}", group_index=0, batch_index=0,
                          category=category, status="completed", outcome=outcome, reward=0.0,
                          turns=1, prompt_tokens=tokens, completion_tokens=1,
                          chat=[ChatMessage(role="user", content="q")])
            for index, (category, outcome, tokens) in enumerate(outcomes)]
    path.write_text("".join(json.dumps(row.model_dump(mode="json")) + "\n" for row in rows))
    return path


def test_categories_then_all_then_prompt_tokens(tmp_path: Path) -> None:
    base = write(tmp_path / "base.jsonl", [("insert", "incorrect", 100), ("select", "incorrect", 100)])
    tuned = write(tmp_path / "tuned.jsonl", [("insert", "correct", 300), ("select", "incorrect", 500)])
    lines = evaluation_table({"base": base, "SFT": tuned}).splitlines()
    assert lines[0] == "| category | base | SFT |"
    assert lines[2] == "| insert | 0.0% [0.0, 79.3] (0/1) | 100.0% [20.7, 100.0] (1/1) |"
    assert lines[3].startswith("| select | 0.0%")
    assert lines[4] == "| **all** | 0.0% [0.0, 65.8] (0/2) | 50.0% [9.5, 90.5] (1/2) |"
    assert lines[5] == "| mean prompt tokens per episode | 100 | 400 |"


def test_an_episode_without_an_agent_turn_is_in_no_success_rate(tmp_path: Path) -> None:
    # a game its opponent decided before the agent's turn: neither a success nor a trial
    rows = [EpisodeRecord(sample_id=f"validation-{index:06d}", group_index=0, batch_index=0,
                          category="game", status=status, outcome=outcome, reward=0.0,
                          turns=1, prompt_tokens=10, completion_tokens=1,
                          chat=[ChatMessage(role="user", content="q")])
            for index, (status, outcome) in enumerate([("completed", "correct"),
                                                       ("no_agent_turn", "unknown")])]
    path = tmp_path / "game.jsonl"
    path.write_text("".join(json.dumps(row.model_dump(mode="json")) + "\n" for row in rows))
    lines = evaluation_table({"run": path}).splitlines()
    assert lines[2].endswith("(1/1) |") and lines[3].endswith("(1/1) |")
