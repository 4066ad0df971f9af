"""A problem's table as SQLAlchemy sees it: typed columns and rows coerced to those types.

Declared types map to portable ones: integers to INTEGER, REAL/FLOAT/DOUBLE to a double,
DECIMAL(p,s) to NUMERIC(p,s) read back as float, VARCHAR/CHAR(n) to a string of n,
anything else (TEXT, DATE, TIME, YEAR, ...) to TEXT, dates staying text as in the
benchmarks. A numeric column whose values do not all convert becomes TEXT, so that a
row is never refused by a stricter server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from sqlalchemy import Column, Double, Integer, MetaData, Numeric, String, Table, Text
from sqlalchemy.types import TypeEngine

from src.tasks.instance.db_bench.problem import TableSpec, Value

_INTEGER_TYPES = frozenset({"INT", "INTEGER", "BIGINT", "SMALLINT", "TINYINT", "MEDIUMINT"})
_FLOAT_TYPES = frozenset({"REAL", "FLOAT", "DOUBLE", "DOUBLE PRECISION"})
_DECIMAL_TYPES = frozenset({"DECIMAL", "NUMERIC"})
_STRING_TYPES = frozenset({"VARCHAR", "CHAR", "CHARACTER VARYING", "CHARACTER"})
_DECLARED = re.compile(r"^\s*([A-Za-z ]+?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*(?:UNSIGNED)?\s*$",
                       re.IGNORECASE)


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


def build_table(spec: TableSpec) -> tuple[Table, list[dict[str, Value]]]:
    """The SQLAlchemy table and the rows to insert, keyed by column name."""
    columns: list[Column] = []
    converted: list[Sequence[Value]] = []
    for index, column_spec in enumerate(spec.columns):
        column_type = _column_type(column_spec.type)
        values = [row[index] for row in spec.rows]
        try:
            values = [_converter(column_type)(value) for value in values]
        except (TypeError, ValueError):
            column_type = Text()
            values = [value if value is None else str(value) for value in values]
        columns.append(Column(column_spec.name, column_type, key=f"c{index}"))
        converted.append(values)
    table = Table(spec.name, MetaData(), *columns)
    rows = [{f"c{index}": values[row] for index, values in enumerate(converted)}
            for row in range(len(spec.rows))]
    return table, rows
