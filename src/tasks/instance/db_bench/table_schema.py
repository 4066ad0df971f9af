"""A problem's table as SQLAlchemy sees it: typed columns and rows coerced to those types.

Declared types map to portable ones: integers to INTEGER, REAL/FLOAT/DOUBLE to a double,
DECIMAL(p,s) to NUMERIC(p,s) read back as float, VARCHAR/CHAR(n) to a string of n,
anything else (TEXT, DATE, TIME, YEAR, ...) to TEXT, dates staying text as in the
benchmarks. A numeric column whose values do not all convert becomes TEXT, so that a
row is never refused by a stricter server.

With `number_columns` (for PostgreSQL) a text column whose values are all numbers
written plainly ('39', '-4', '9.626'; not '007', '+2', '1e3' or '') becomes BIGINT when
they are integers, else NUMERIC, which keeps their digits: the benchmarks' SQL compares
such columns with bare numbers (`WHERE Game = 39`), which MySQL does by converting the
text and PostgreSQL refuses outright (no text = integer operator). The price, on
PostgreSQL only: text operations on such a column (`LIKE '201%'`, `LENGTH`) are refused
there, and MAX/MIN/ORDER BY compare it as numbers where MySQL's TEXT compares strings; on
AgentBench's 60 dev rows the oracle scores 60/60 on all three servers either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
)
from sqlalchemy.types import TypeEngine

from src.tasks.instance.db_bench.problem import TableSpec, Value

_INTEGER_TYPES = frozenset({"INT", "INTEGER", "BIGINT", "SMALLINT", "TINYINT", "MEDIUMINT"})
_FLOAT_TYPES = frozenset({"REAL", "FLOAT", "DOUBLE", "DOUBLE PRECISION"})
_DECIMAL_TYPES = frozenset({"DECIMAL", "NUMERIC"})
_STRING_TYPES = frozenset({"VARCHAR", "CHAR", "CHARACTER VARYING", "CHARACTER"})
_DECLARED = re.compile(r"^\s*([A-Za-z ]+?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*(?:UNSIGNED)?\s*$",
                       re.IGNORECASE)
# Only forms a numeric column keeps digit for digit ('007' or '+2' would come back changed).
_PLAIN_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
_PLAIN_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+")
_BIGINT_RANGE = range(-2**63, 2**63)

Cell = Value | Decimal  # a value as inserted: NUMERIC columns take exact decimals


def _column_type(declared: str) -> TypeEngine:
    match = _DECLARED.match(declared)
    if match is None:
        return Text()
    base, first, second = match.group(1).upper(), match.group(2), match.group(3)
    if base in _INTEGER_TYPES:
        return Integer()
    if base in _FLOAT_TYPES:
        return Double()
    if base in _DECIMAL_TYPES:
        return (Numeric(int(first), int(second or 0), asdecimal=False) if first
                else Double())
    if base in _STRING_TYPES and first:
        return String(int(first))
    return Text()


def _converter(column_type: TypeEngine) -> Callable[[Value], Value]:
    if isinstance(column_type, Integer):
        return lambda value: value if value is None else _to_int(value)
    if isinstance(column_type, Double | Numeric):
        return lambda value: value if value is None else float(value)
    return lambda value: value if value is None else str(value)


def _to_int(value: int | float | str) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    number = float(value)
    if not number.is_integer():
        raise ValueError(f"{value!r} is not an integer")
    return int(number)


def _plain_number(text: str) -> int | Decimal | None:
    """The number a text holds, if it is one written plainly; else None."""
    if _PLAIN_INTEGER.fullmatch(text):
        return int(text)
    if _PLAIN_DECIMAL.fullmatch(text):
        return Decimal(text)
    return None


def _as_numbers(texts: Sequence[str | None]) -> tuple[TypeEngine, list[Cell]] | None:
    """BIGINT or NUMERIC and the values as numbers, when every text but NULLs is a plain
    number; None otherwise, or when every value is NULL (nothing says what they are)."""
    numbers = [None if text is None else _plain_number(text) for text in texts]
    if any(number is None and text is not None for number, text in zip(numbers, texts,
                                                                       strict=True)):
        return None
    present = [number for number in numbers if number is not None]
    if not present:
        return None
    if all(isinstance(number, int) and number in _BIGINT_RANGE for number in present):
        return BigInteger(), list(numbers)
    return Numeric(), [None if number is None else Decimal(number) for number in numbers]


def build_table(spec: TableSpec,
                number_columns: bool = False) -> tuple[Table, list[dict[str, Cell]]]:
    """The SQLAlchemy table and the rows to insert, keyed by column name. `number_columns`:
    text columns that hold only numbers become numeric (see the module's docstring)."""
    columns: list[Column] = []
    converted: list[Sequence[Cell]] = []
    for index, column_spec in enumerate(spec.columns):
        column_type = _column_type(column_spec.type)
        values = [row[index] for row in spec.rows]
        try:
            values = [_converter(column_type)(value) for value in values]
        except (TypeError, ValueError):
            column_type = Text()
            values = [value if value is None else str(value) for value in values]
        cells: list[Cell] = list(values)
        if number_columns and isinstance(column_type, String):  # its values are str or None
            typed = _as_numbers([None if value is None else str(value) for value in values])
            if typed is not None:
                column_type, cells = typed
        columns.append(Column(column_spec.name, column_type, key=f"c{index}"))
        converted.append(cells)
    table = Table(spec.name, MetaData(), *columns)
    rows = [{f"c{index}": values[row] for index, values in enumerate(converted)}
            for row in range(len(spec.rows))]
    return table, rows
