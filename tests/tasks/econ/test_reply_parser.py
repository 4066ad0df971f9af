"""The strict decision parser: exactly one object with "work" and "consumption" in [0, 1]."""

from __future__ import annotations

import time

import pytest

from src.tasks.instance.econ.reply_parser import Decision, FormatFailure, parse_decision


@pytest.mark.parametrize(("reply", "expected"), [
    ('{"work": 0.8, "consumption": 0.6}', Decision(0.8, 0.6)),
    ('  {"consumption": 0.3, "work": 1}\n', Decision(1.0, 0.3)),  # key order does not matter
    ('```json\n{"work": 0, "consumption": 1.0}\n```', Decision(0.0, 1.0)),
    ('```json {"work": 0.5, "consumption": 0.5} ```', Decision(0.5, 0.5)),
    ('{"work": 0.61, "consumption": 0.333}', Decision(0.6, 0.34)),  # snapped to 0.02 steps
])
def test_well_formed_replies(reply: str, expected: Decision) -> None:
    assert parse_decision(reply) == expected


@pytest.mark.parametrize("reply", [
    'Sure! {"work": 0.8, "consumption": 0.6}',
    '{"work": 0.8, "consumption": 0.6} I hope this helps.',
    '{"work": 0.8}',
    '{"consumption": 0.6}',
    '{"work": 0.8, "consumption": 0.6, "savings": 0.4}',
    '{"work": "0.8", "consumption": 0.6}',
    '{"work": 0.8, "consumption": "high"}',
    '{"work": true, "consumption": 0.6}',
    '{"work": null, "consumption": 0.6}',
    '{"work": [0.8], "consumption": 0.6}',
    '{"work": NaN, "consumption": 0.6}',
    '{"work": 0.8, "consumption": Infinity}',
    '{"work": -Infinity, "consumption": 0.6}',
    '{"work": 1e999, "consumption": 0.6}',
    '{"work": 1.2, "consumption": 0.6}',
    '{"work": 0.8, "consumption": -0.1}',
    '{"work": 0.8, "work": 0.2, "consumption": 0.6}',
    '{"work": 0.8, "consumption": 0.6}\n{"work": 0.2, "consumption": 0.1}',
    'Here is my decision:\n```json\n{"work": 0.8, "consumption": 0.6}\n```',
    '```json\n{"work": 0.8, "consumption": 0.6}\n```\nThat is my answer.',
    '```\n{"work": 0.8, "consumption": 0.6}\n```',
    '```json\n{"work": 0.8, "consumption": 0.6}\n```\n```json\n{"work": 1, "consumption": 1}\n```',
    "{'work': 0.8, 'consumption': 0.6}",
    '[{"work": 0.8, "consumption": 0.6}]',
    "",
    "[" * 100_000,
])
def test_malformed_replies_are_format_failures_not_exceptions(reply: str) -> None:
    result = parse_decision(reply)
    assert isinstance(result, FormatFailure) and result.reason


def reason(reply: str) -> str:
    result = parse_decision(reply)
    assert isinstance(result, FormatFailure)
    return result.reason


def test_failures_name_the_problem() -> None:
    assert "missing ['consumption']" in reason('{"work": 1}')
    assert "unexpected ['x']" in reason('{"work": 1, "consumption": 0, "x": 2}')
    assert "outside [0, 1]" in reason('{"work": 2, "consumption": 0}')
    assert "not a number" in reason('{"work": "1", "consumption": 0}')
    assert "duplicate keys ['work']" in reason('{"work": 1, "work": 1, "consumption": 0}')


@pytest.mark.parametrize("reply", [
    "```json" + " " * 50_000 + "x",  # the fence's reading backtracked over each space
    "{" + ", ".join(f'"k{index}": {index}' for index in range(50_000)) + "}",
    "{" + ", ".join(['"work": 0.5'] * 50_000) + "}",  # duplicates were counted key by key
], ids=["fence of spaces", "many keys", "many duplicates"])
def test_long_replies_are_read_in_linear_time(reply: str) -> None:
    started = time.monotonic()
    assert isinstance(parse_decision(reply), FormatFailure)
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("reply", [
    "{" + ", ".join(f'"k{index}": {index}' for index in range(50_000)) + "}",
    "{" + ", ".join(f'"k{index}": 1, "k{index}": 2' for index in range(50_000)) + "}",
    '{"work": "' + "x" * 100_000 + '", "consumption": 0.5}',
    '{"work": ' + "[" * 900 + "]" * 900 + ', "consumption": 0.5}',
    '{"work": ' + "9" * 4_000 + ', "consumption": 0.5}',
], ids=["many keys", "many duplicates", "long text", "deep list", "long number"])
def test_the_reason_of_a_failure_stays_short(reply: str) -> None:
    assert len(reason(reply)) < 500
