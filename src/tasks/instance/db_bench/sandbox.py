"""One episode's SQL sandbox: the problem's table in a private database, and a safe `execute`.

The model's statements pass the statement guard, run within the sandbox's bounds (time,
rows and characters read, value length, storage) on a connection that can reach nothing
but the sandbox (see sandbox_backends), and come back as text: rows as AgentBench shows
them (a Python list of tuples), at most `max_rows_shown` of them with a note of how many
were cut, or "Error: ..." for a refused or failed statement or a broken bound, cut at
`max_observation_chars`. Nothing the model sends raises. A statement that leaves the
sandbox's tables larger than `max_storage_mb` sets `storage_exceeded` (on PostgreSQL it
is also rolled back; on SQLite such a write fails instead).

The grader reads the problem's table within the same bounds, and only while it is still
the table it was: a table replaced by a view, or whose columns changed, reads as None.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from src.tasks.instance.db_bench.problem import TableSpec, Value
from src.tasks.instance.db_bench.sandbox_backends import open_backend
from src.tasks.instance.db_bench.sandbox_backends.base import (
    Fetched,
    SandboxLimits,
    StatementFailed,
    StorageExceeded,
)
from src.tasks.instance.db_bench.statement_guard import StatementGuard, StatementRejected
from src.tasks.instance.db_bench.table_schema import build_table


class SandboxSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # sqlite:// (in memory), mysql+pymysql://root@127.0.0.1:3306/test,
    # postgresql+psycopg://postgres@127.0.0.1:5432/test
    url: str = "sqlite://"
    statement_timeout_s: float = Field(default=5.0, gt=0)
    max_rows_shown: int = Field(default=20, ge=1)
    # the longest string or blob a statement may build or return (PostgreSQL: the longest
    # row of a result, as text); longer is an error
    max_value_bytes: int = Field(default=100_000, ge=1_000)
    # what the episode's tables may hold (SQLite: in this process's memory)
    max_storage_mb: float = Field(default=16.0, ge=1)
    # the longest observation of one statement; the rest is cut with a note
    max_observation_chars: int = Field(default=20_000, ge=100)


def plain_value(value: Any) -> Value:
    """A driver's value as int, float, str or None, the same for every server."""
    if value is None or isinstance(value, int | float | str):
        return int(value) if isinstance(value, bool) else value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


@dataclass(frozen=True)
class StatementResult:
    rows: tuple[tuple[Value, ...], ...] | None = None  # None: the statement returns no rows
    complete: bool = True  # False: reading stopped (FETCH_ROWS rows or too many characters)
    rowcount: int = 0
    error: str | None = None

    def observation(self, max_rows: int, max_chars: int) -> str:
        if self.error is not None:
            return _cut(f"Error: {self.error}", max_chars)
        if self.rows is None:
            return f"Query OK, {self.rowcount} row(s) affected."
        # a value longer than the whole observation is cut before repr copies it
        shown = [tuple(value[:max_chars + 1] if isinstance(value, str) else value
                       for value in row) for row in self.rows[:max_rows]]
        text = _cut(repr(shown), max_chars)
        if len(self.rows) > max_rows or not self.complete:
            total = f"{len(self.rows)}" if self.complete else f"more than {len(self.rows)}"
            text += f"\n({min(max_rows, len(self.rows))} of {total} rows shown; the rest were cut.)"
        return text

    def flat_values(self) -> tuple[Value, ...]:
        return tuple(value for row in self.rows or () for value in row)


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n(the output was cut at {max_chars} characters.)"


class SqlSandbox:
    """Created with the table loaded; close() drops the database, schema or user.

    Attributes:
        storage_exceeded: a statement left the sandbox's tables larger than
            `max_storage_mb` (the episode is over: its reply ran past a bound).
    """

    def __init__(self, settings: SandboxSettings, table: TableSpec) -> None:
        self.settings = settings
        self.table = table
        self.storage_exceeded = False
        self._backend = open_backend(settings.url, SandboxLimits(
            statement_timeout_s=settings.statement_timeout_s,
            max_value_bytes=settings.max_value_bytes,
            max_storage_bytes=int(settings.max_storage_mb * 1024 * 1024)))
        self.dialect = self._backend.dialect
        self._preparer = self._backend.connection.dialect.identifier_preparer
        self._guard = StatementGuard(self.dialect, self._backend.foreign_namespaces,
                                     own_names=frozenset({table.name.lower()}),
                                     max_value_bytes=settings.max_value_bytes)
        # Only PostgreSQL refuses to compare text with a number; SQLite and MySQL keep every
        # column as the data declares it (MySQL's TEXT is what AgentBench's md5 hashes).
        self._table, self._rows = build_table(table,
                                              number_columns=self.dialect == "postgresql")
        try:
            self._table.create(self._backend.connection)
            self.restore_rows()
            self._shape = self._backend.table_shape(table.name)
            if not self._shape:
                raise RuntimeError(f"table '{table.name}': created, but not in the "
                                   f"{self.dialect} catalog")
        except Exception:
            self.close()
            raise

    def quote(self, name: str) -> str:
        """`name` quoted for SQL sent as is (no parameters). Not the preparer's
        quote_identifier: for a format/pyformat driver (pymysql, psycopg) it also doubles `%`
        for the driver to undo, which a statement without parameters never gets."""
        preparer = self._preparer
        return (preparer.initial_quote
                + name.replace(preparer.escape_quote, preparer.escape_to_quote)
                + preparer.final_quote)

    def restore_rows(self) -> None:
        """Give the table its original rows back (its columns must be unchanged).

        Rows rather than the table are replaced: DDL is slow on InnoDB.
        """
        connection = self._backend.connection
        connection.execute(self._table.delete())
        if self._rows:
            connection.execute(self._table.insert(), self._rows)

    def execute(self, sql: str) -> StatementResult:
        """Run one untrusted statement; refusals, failures and broken bounds come back as
        `error`."""
        try:
            statement = self._guard.check(sql)
        except StatementRejected as error:
            return StatementResult(error=str(error))
        try:
            return self._result(self._backend.run_within_storage(statement))
        except StorageExceeded:
            self.storage_exceeded = True
            return StatementResult(error=f"the sandbox's tables hold more than "
                                         f"{self.settings.max_storage_mb:g} MB, its limit")
        except StatementFailed as error:
            return StatementResult(error=str(error))

    def observation(self, result: StatementResult) -> str:
        settings = self.settings
        return result.observation(settings.max_rows_shown, settings.max_observation_chars)

    def observe(self, sql: str) -> str:
        return self.observation(self.execute(sql))

    def _run(self, statement: str) -> StatementResult:
        try:
            return self._result(self._backend.run(statement))
        except StatementFailed as error:
            return StatementResult(error=str(error))

    @staticmethod
    def _result(fetched: Fetched) -> StatementResult:
        if fetched.rows is None:
            return StatementResult(rowcount=fetched.rowcount)
        return StatementResult(rows=tuple(tuple(plain_value(value) for value in row)
                                          for row in fetched.rows),
                               complete=fetched.complete)

    # ---- grading (trusted statements of our own) -----------------------------------
    def table_rows(self) -> list[tuple[Value, ...]] | None:
        """Every row of the problem's table now; None if it is gone, no longer the table it
        was (a view in its place, other columns) or cannot be read whole within the bounds."""
        if not self._table_intact():
            return None
        result = self._run(f"SELECT * FROM {self._own_table()}")
        if result.error is not None or not result.complete:
            return None
        return list(result.rows or ())

    def table_md5(self) -> str | None:
        """AgentBench's MySQL hash of the table ("None" for an empty one); None elsewhere,
        and where the table is not the one it was."""
        if self.dialect != "mysql" or not self._table_intact():
            return None
        columns = ", ".join(self.quote(column.name) for column in self.table.columns)
        result = self._run(
            f"SELECT md5(group_concat(rowhash ORDER BY rowhash)) AS hash FROM (SELECT "
            f"substring(md5(concat_ws(',', {columns})), 1, 5) AS rowhash "
            f"FROM {self._own_table()}) AS sub")
        if result.error is not None or not result.rows:
            return None
        return str(result.rows[0][0])

    def _table_intact(self) -> bool:
        try:
            return self._backend.table_shape(self.table.name) == self._shape
        except StatementFailed:
            return False

    def _own_table(self) -> str:
        return self._backend.qualified(self.quote(self.table.name))

    def close(self) -> None:
        self._backend.close()
