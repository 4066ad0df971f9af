"""Fuzzing every task with model replies: any text, text shaped like each task's reply
format, and a fixed corpus of hostile replies (deep nesting, a megabyte, huge and
non-finite numbers, NUL bytes, lone surrogates, duplicate JSON keys, ...) each end as a
scored step, never an exception (which the loop records as `task_error`, an unscored
episode). DB-bench replies run their SQL in the episode's SQLite sandbox, so this also
feeds the sandbox random SQL. `experiments/hostile_inputs/fuzz_model_text.py` drives the
same corpus, and seeded mutations, at scale."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from src.tasks.adapters.gymnasium_text.task import GymnasiumTextTask
from src.tasks.adapters.reasoning_gym.task import ReasoningGymTask
from src.tasks.adapters.textarena.task import TextArenaTask
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill, DBBenchSplits
from src.tasks.instance.econ.task import EconDecisionTask
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.splits import Splits, SplitsWithSelection
from src.tasks.task import Task


def _random_unicode(seed: int, length: int) -> str:
    """Code points from every plane, surrogates left out (they have their own entry)."""
    rng = random.Random(seed)
    ranges = ((0x20, 0x7F), (0xA0, 0xD800), (0xE000, 0x110000))
    return "".join(chr(rng.randrange(*rng.choice(ranges))) for _ in range(length))


MEGABYTE = 2**20
# Replies no model should write and any model may: each must end as a scored step.
HOSTILE_REPLIES: dict[str, str] = {
    "empty": "",
    "whitespace": " \t\n\r\x0b\x0c" * 10_000,
    "nul_bytes": "\x00" * 1_000 + "\\boxed{1}\x00[1]\x00",
    "lone_surrogates": '\ud800\udfff\udbff [5] \\boxed{\ud800} {"work": "\ud800"}',
    "control_characters": "".join(map(chr, range(32))) + "\x7f\x85\u2028\u2029\ufeff\uffff",
    "bidi_marks": '\u202e\u2066[3]\u2069 \\boxed{\u200f4\u200e} \u061c{"work": 0.5}',
    "random_unicode": _random_unicode(0, 5_000),
    "one_megabyte": ("lorem ipsum " * 100_000)[:MEGABYTE],
    "deep_brackets": "[" * 100_000,
    "deep_braces": "{" * 100_000,
    "deep_parentheses": "(" * 100_000,
    "deep_boxed": "\\boxed{" * 100_000,
    "deep_tool_calls": "<tool_call>" * 100_000,
    "deep_answer_tags": "<answer>" * 100_000,
    "deep_think": "<think>" * 50_000 + "</think>" * 50_000,
    "closed_deep_json": '{"a": ' * 5_000 + "1" + "}" * 5_000,
    "closed_deep_list": "[" * 5_000 + "]" * 5_000,
    "boxed_megabyte_number": "\\boxed{" + "9" * MEGABYTE + "}",
    "huge_integer": "9" * 100_000,
    "huge_integer_move": "[" + "9" * 100_000 + "]",
    "float_specials": "1e309 -1e309 -inf inf NaN nan Infinity -0.0 1e-400 0x1p-1074",
    "boxed_tower": "\\boxed{9^{9^{9^{9^{9}}}}}",
    "boxed_factorial": "\\boxed{(10^{100})!}",
    "boxed_nested_fractions": "\\boxed{" + "\\frac{1}{" * 500 + "1" + "}" * 500 + "}",
    "json_nan": '{"work": NaN, "consumption": Infinity}',
    "json_overflow": '{"work": 1e309, "consumption": -1e309}',
    "json_big_integer": '{"work": ' + "9" * 5_000 + ', "consumption": 0.5}',
    "json_duplicate_keys": '{"work": 0.5, "work": 0.4, "consumption": 0.3}',
    "json_numbers_as_strings": '{"work": "0.5", "consumption": "0.5"}',
    "json_many_keys": "{" + ", ".join(f'"k{index}": {index}' for index in range(100_000)) + "}",
    "json_many_duplicates": "{" + ", ".join(['"work": 0.5'] * 100_000) + "}",
    "fence_of_whitespace": "```json" + " " * 100_000 + "x",
    "many_fences": "```json\n{}\n```" * 10_000,
    "repeated_final_answer": "Action: Answer\nFinal Answer: [1]\n" * 20_000,
    "final_answer_deep": "Action: Answer\nFinal Answer: " + "[" * 100_000,
    "final_answer_integer_past_floats": "Action: Answer\nFinal Answer: [1" + "0" * 400 + "]",
    "final_answer_long_list": "Action: Answer\nFinal Answer: [" + ", ".join(["1e309"] * 50_000)
                              + "]",
    "tool_call_deep_arguments": '<tool_call>{"name": "f", "arguments": ' + "[" * 100_000
                                + "}</tool_call>",
    "tool_call_escaped_surrogates": '<tool_call>{"name": "\\ud800", "arguments": '
                                    '{"\\udfff": 1}}</tool_call>',
    "tool_call_non_finite": '<tool_call>{"name": "f", "arguments": {"x": NaN, "y": 1e309}}'
                            "</tool_call>",
    "tool_calls_many": '<tool_call>{"name": "f", "arguments": {}}</tool_call>\n' * 20_000,
    "tool_call_arguments_text": '<tool_call>{"name": "f", "arguments": "' + "[" * 5_000
                                + '"}</tool_call>',
}
# Pieces of each task's reply format and of hostile text, spliced into valid replies by
# the study's mutations.
FRAGMENTS: tuple[str, ...] = (
    "\\boxed{", "}", "{", "[", "]", "(", "<tool_call>", "</tool_call>", "<answer>",
    "</answer>", "<think>", "</think>", "Final Answer:", "Action: Answer\n",
    "Action: Operation\n", '"work":', '"consumption":', "```json", "```", "NaN", "1e309",
    "-inf", "9" * 5_000, "\x00", "\ud800", "\u202e", "\r\n", '"', "'", "\\", ",", ":")

SQL_WORDS = st.sampled_from([
    "SELECT", "*", "FROM", "WHERE", "INSERT INTO", "VALUES", "UPDATE", "SET", "DELETE",
    "DROP TABLE", "ATTACH DATABASE", "PRAGMA", "WITH RECURSIVE", "UNION", "(", ")", ",", ";",
    "'", '"', "`", "--", "/*", "*/", "1", "-1", "0x7f", "NULL", "sqlite_master", "load_extension",
    "randomblob(1000000000)", "t", "name", "="])
SQL = st.lists(SQL_WORDS | st.text(max_size=8), max_size=16).map(" ".join)
NUMBERS = (st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**30, 10**30)
           | st.text(max_size=6) | st.none() | st.booleans())
# digit runs past the 4,300 digits Python converts to an int by default
DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=6_000)
DB_BENCH_REPLIES = st.one_of(
    st.text(max_size=300),
    SQL.map(lambda sql: f"Action: Operation\n```sql\n{sql}\n```"),
    st.text(max_size=60).map(lambda text: f"Action: Answer\nFinal Answer: {text}"),
    st.lists(NUMBERS, max_size=4).map(lambda items: f"Action: Answer\nFinal Answer: {items}"),
    DIGITS.map(lambda digits: f"Action: Answer\nFinal Answer: [{digits}]"))
ECON_REPLIES = st.one_of(
    st.text(max_size=200),
    st.dictionaries(st.sampled_from(["work", "consumption", "other"]), NUMBERS, max_size=3)
    .map(json.dumps),
    st.text(max_size=60).map(lambda text: f"```json\n{text}\n```"))
MATH_REPLIES = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="0123456789+-*/^{}()\\.,x ", max_size=40).map(lambda t: f"\\boxed{{{t}}}"),
    st.text(max_size=60).map(lambda text: f"<think>{text}</think>\\boxed{{{text}}}"))
REASONING_GYM_REPLIES = st.one_of(
    st.text(max_size=200),
    st.text(max_size=60).map(lambda text: f"\\boxed{{{text}}}"),
    st.text(max_size=60).map(lambda text: f"<answer>{text}</answer>"),
    DIGITS.map(lambda digits: f"The answer is \\boxed{{{digits}}}."))
MOVES = st.one_of(
    st.text(max_size=100),
    st.integers(-10**6, 10**6).map(lambda number: f"[{number}]"),
    st.integers(-10**6, 10**6).map(str),
    DIGITS.map(lambda digits: f"[{digits}]"),
    DIGITS)


def build_families() -> dict[str, Task[Any]]:
    """One small family of each task; multi-turn where the task can be: a wrong math
    answer gets a retry, an econ episode asks two households in turn."""
    four = Splits(num_train=4, num_validation=4)
    small = SplitsWithSelection(num_train=4, num_validation=2)
    return {
        "db_bench": DBBenchSingleSkill(splits=DBBenchSplits(num_train=8, num_validation=8)),
        "econ": EconDecisionTask(splits=four, num_economies=1, months=24, num_households=4,
                                 households_per_sample=2),
        "math": MathProblemsTask(splits=four, levels=[1, 4], max_round=2),
        "reasoning_gym": ReasoningGymTask("chain_sum", splits=small),
        "reasoning_gym_answer_tag": ReasoningGymTask("chain_sum", splits=small,
                                                     answer_format="answer_tag"),
        "textarena": TextArenaTask("GuessTheNumber-v0", splits=small, max_turns=3),
        "gymnasium_text": GymnasiumTextTask(
            entry_point="examples.gymnasium_text.number_guess:NumberGuess", splits=small,
            max_turns=3)}


@pytest.fixture(scope="module")
def tasks() -> Iterator[dict[str, Task[Any]]]:
    families = build_families()
    yield families
    for family in families.values():
        family.close()


def scored_steps(task: Task[Any], sample_index: int, reply: Callable[[int], str],
                 max_steps: int = 3) -> None:
    """Steps an episode with `reply(step)` until it ends or `max_steps`; each step must be
    scored: an exception here is what the loop records as `task_error`."""
    environment = task.new_episode()
    try:
        environment.reset(options={"sample_id": task.sample_ids("train")[sample_index]})
        for step in range(max_steps):
            observation, reward, terminated, truncated, info = environment.step(reply(step))
            assert isinstance(observation, str) and math.isfinite(reward)
            assert not info["status"].failed
            if terminated or truncated:
                break
    finally:
        environment.close()


@given(reply=DB_BENCH_REPLIES, sample_index=st.integers(0, 7))
def test_fuzz_db_bench_replies(tasks: dict[str, Task[Any]], reply: str,
                               sample_index: int) -> None:
    scored_steps(tasks["db_bench"], sample_index, lambda step: reply, max_steps=1)


@given(reply=ECON_REPLIES, sample_index=st.integers(0, 3))
def test_fuzz_econ_replies(tasks: dict[str, Task[Any]], reply: str, sample_index: int) -> None:
    scored_steps(tasks["econ"], sample_index, lambda step: reply)


@given(reply=MATH_REPLIES, sample_index=st.integers(0, 3))
def test_fuzz_math_replies(tasks: dict[str, Task[Any]], reply: str, sample_index: int) -> None:
    scored_steps(tasks["math"], sample_index, lambda step: reply)


@given(reply=REASONING_GYM_REPLIES, sample_index=st.integers(0, 3),
       family=st.sampled_from(["reasoning_gym", "reasoning_gym_answer_tag"]))
def test_fuzz_reasoning_gym_replies(tasks: dict[str, Task[Any]], reply: str, sample_index: int,
                                    family: str) -> None:
    scored_steps(tasks[family], sample_index, lambda step: reply)


@given(moves=st.lists(MOVES, min_size=3, max_size=3), sample_index=st.integers(0, 3),
       family=st.sampled_from(["textarena", "gymnasium_text"]))
def test_fuzz_game_moves(tasks: dict[str, Task[Any]], moves: list[str], sample_index: int,
                         family: str) -> None:
    scored_steps(tasks[family], sample_index, moves.__getitem__)


FAMILIES = ("db_bench", "econ", "math", "reasoning_gym", "reasoning_gym_answer_tag",
            "textarena", "gymnasium_text")
# Each runs math-verify to its 5 s bound, twice (a wrong answer gets a retry): left to the
# study here, the bound itself is tested in test_math_rewards.py.
VERIFIER_OVERRUNS = frozenset({"boxed_tower", "boxed_factorial", "boxed_nested_fractions"})


@pytest.mark.parametrize(("family", "name"), [
    (family, name) for family in FAMILIES for name in sorted(HOSTILE_REPLIES)
    if not (family == "math" and name in VERIFIER_OVERRUNS)])
def test_hostile_replies_are_scored(tasks: dict[str, Task[Any]], family: str, name: str) -> None:
    scored_steps(tasks[family], 0, lambda step: HOSTILE_REPLIES[name])
