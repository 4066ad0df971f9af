"""Grading: a final answer against the expected values, and a table against the reference table.

Answers are compared as flat lists of values (AgentBench's `["A", "B"]` and
LifelongAgentBench's `[(a, b), (c, d)]` both flatten to values): quotes and spaces around
a value are stripped, `Decimal('1.5')` is read as 1.5, numbers are equal within 1e-6
(relative or absolute), "None"/"NULL" stand for SQL NULL, and the order counts only when
the question asks for one (otherwise the values are compared as a multiset).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence

from src.tasks.instance.db_bench.problem import Value

TOLERANCE = 1e-6
_DECIMAL_CALL = re.compile(r"Decimal\(\s*(['\"]?)([^'\")]*)\1\s*\)")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_NULLS = frozenset({"none", "null"})
_NUMERIC, _TEXT, _NULL = 0, 1, 2


def parse_final_answer(text: str) -> list[Value]:
    """The values of a `Final Answer:` line; unreadable text counts as one string value."""
    cleaned = _DECIMAL_CALL.sub(lambda match: match.group(2), text.strip())
    try:
        parsed = ast.literal_eval(cleaned)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        inner = cleaned[1:-1] if cleaned.startswith("[") and cleaned.endswith("]") else cleaned
        return [inner.strip()] if inner.strip() else []
    return list(_flatten(parsed))


def _flatten(value: object) -> Iterator[Value]:
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _flatten(item)
    elif isinstance(value, bool):
        yield int(value)
    elif value is None or isinstance(value, int | float | str):
        yield value
    else:
        yield str(value)


def format_final_answer(values: Sequence[Value]) -> str:
    """A list literal that parse_final_answer reads back to the same values."""
    parts = ["None" if value is None
             else json.dumps(value, ensure_ascii=False) if isinstance(value, str)
             else repr(value) for value in values]
    return "[" + ", ".join(parts) + "]"


def _normal(value: Value) -> tuple[int, float | str]:
    if value is None:
        return _NULL, ""
    if isinstance(value, int | float):
        try:
            return _NUMERIC, float(value)
        except OverflowError:  # an integer past the floats reads as its text would: infinite
            return _NUMERIC, math.inf if value > 0 else -math.inf
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].strip()
    if text.lower() in _NULLS:
        return _NULL, ""
    if _NUMBER.fullmatch(text):
        return _NUMERIC, float(text)
    return _TEXT, text


def _same(first: tuple[int, float | str], second: tuple[int, float | str]) -> bool:
    if first[0] != second[0]:
        return False
    if first[0] == _NUMERIC:
        return math.isclose(float(first[1]), float(second[1]), rel_tol=TOLERANCE,
                            abs_tol=TOLERANCE)
    return first[1] == second[1]


def answers_match(given: Sequence[Value], expected: Sequence[Value], ordered: bool) -> bool:
    left = [_normal(value) for value in given]
    right = [_normal(value) for value in expected]
    if len(left) != len(right):
        return False
    if not ordered:
        left.sort()
        right.sort()
    return all(_same(a, b) for a, b in zip(left, right, strict=True))


def tables_match(rows: Sequence[tuple[Value, ...]] | None,
                 reference: Sequence[tuple[Value, ...]] | None) -> bool:
    """Same rows, in any order (a table has none); a missing table never matches."""
    if rows is None or reference is None:
        return False
    return Counter(rows) == Counter(reference)
