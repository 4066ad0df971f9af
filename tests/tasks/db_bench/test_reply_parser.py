"""Replies: well-formed ones are read, malformed ones are normal outcomes, never exceptions."""

from __future__ import annotations

import pytest

from src.records.episode import Outcome
from src.tasks.instance.db_bench.reply_parser import (
    Answer,
    FormatFailure,
    Operation,
    parse_reply,
)
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill, DBBenchSplits

MALFORMED = {
    "no action": "SELECT * FROM employees;",
    "prose": "I think the answer is probably 42, but I am not sure.",
    "operation without a block": "Action: Operation\nSELECT 1;",
    "empty block": "Action: Operation\n```sql\n   \n```",
    "answer without final answer": "Action: Answer\nThe answer is 42.",
    "unknown action": "Action: Query\n```sql\nSELECT 1\n```",
}


def test_well_formed_replies() -> None:
    reply = "Let me look.\nAction: Operation\n```sql\nSELECT * FROM `a b`;\n```\nthen more"
    assert parse_reply(reply) == Operation("SELECT * FROM `a b`;")
    assert parse_reply("Action: Answer\nFinal Answer: [\"x\", 3]") == Answer('["x", 3]')
    # as in AgentBench, the first action and the first block count
    assert parse_reply("Action: Operation\n```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```") == \
        Operation("SELECT 1")
    # two statements in one block are the sandbox's to refuse, not a format failure
    assert parse_reply("Action: Operation\n```sql\nSELECT 1; SELECT 2\n```") == \
        Operation("SELECT 1; SELECT 2")


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_replies_are_format_failures(name: str) -> None:
    assert isinstance(parse_reply(MALFORMED[name]), FormatFailure)


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_reply_ends_the_episode_as_incorrect(name: str) -> None:
    environment = DBBenchSingleSkill(skills=["select"],
                                     splits=DBBenchSplits(num_train=1)).new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    observation, reward, terminated, truncated, info = environment.step(MALFORMED[name])
    assert (observation, reward, terminated, truncated) == ("", -0.1, True, False)
    assert info["outcome"] is Outcome.INCORRECT
    assert info["metrics"]["format_error"] == 1.0 and info["metrics"]["skill/select"] == 0.0
    environment.close()


def test_two_statements_are_an_error_observation_and_the_episode_goes_on() -> None:
    environment = DBBenchSingleSkill(skills=["select"],
                                     splits=DBBenchSplits(num_train=1)).new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    observation, reward, terminated, truncated, _ = environment.step(
        "Action: Operation\n```sql\nSELECT 1; SELECT 2\n```")
    assert observation.startswith("Error: only one SQL statement")
    assert (reward, terminated, truncated) == (0.0, False, False)
    environment.close()
