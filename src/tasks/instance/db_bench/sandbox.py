"""One episode's SQL sandbox: the problem's table in a private database, and a safe `execute`.

The model's statements pass the statement guard, run under a time limit on a connection
that can reach nothing but the sandbox (see sandbox_backends), and come back as text:
rows as AgentBench shows them (a Python list of tuples), at most `max_rows_shown` of them
with a note of how many were cut, or "Error: ..." for a refused or failed statement.
Nothing the model sends raises.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import SQLAlchemyError

from src.tasks.instance.db_bench.problem import TableSpec, Value
from src.tasks.instance.db_bench.sandbox_backends import open_backend
from src.tasks.instance.db_bench.statement_guard import StatementGuard, StatementRejected
from src.tasks.instance.db_bench.table_schema import build_table

_FETCH_LIMIT = 10_000  # rows read from one result at most; the rest is only reported
_NO_PARAMETERS = {"no_parameters": True}  # model SQL is sent as is: `%` is no placeholder


class SandboxSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # sqlite:// (in memory), mysql+pymysql://root@127.0.0.1:3306/test,
    # postgresql+psycopg://postgres@127.0.0.1:5432/test
    url: str = "sqlite://"
    statement_timeout_s: float = Field(default=5.0, gt=0)
    max_rows_shown: int = Field(default=20, ge=1)


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
    complete: bool = True  # False: more than _FETCH_LIMIT rows, the rest not read
    rowcount: int = 0
    error: str | None = None

    def observation(self, max_rows: int) -> str:
        if self.error is not None:
            return f"Error: {self.error}"
        if self.rows is None:
            return f"Query OK, {self.rowcount} row(s) affected."
        text = repr(list(self.rows[:max_rows]))
        if len(self.rows) > max_rows:
            total = f"{len(self.rows)}" if self.complete else f"more than {_FETCH_LIMIT}"
            text += f"\n({max_rows} of {total} rows shown; the rest were cut.)"
        return text

    def flat_values(self) -> tuple[Value, ...]:
        return tuple(value for row in self.rows or () for value in row)


class SqlSandbox:
    """Created with the table loaded; close() drops the database, schema or user."""

    def __init__(self, settings: SandboxSettings, table: TableSpec) -> None:
        self.settings = settings
        self.table = table
        self._backend = open_backend(settings.url, settings.statement_timeout_s)
        self.dialect = self._backend.dialect
        self._connection = self._backend.connection
        self._preparer = self._connection.dialect.identifier_preparer
        self._guard = StatementGuard(self.dialect, self._backend.foreign_namespaces,
                                     own_names=frozenset({table.name.lower()}))
        # Only PostgreSQL refuses to compare text with a number; SQLite and MySQL keep every
        # column as the data declares it (MySQL's TEXT is what AgentBench's md5 hashes).
        self._table, self._rows = build_table(table,
                                              number_columns=self.dialect == "postgresql")
        try:
            self._table.create(self._connection)
            self.restore_rows()
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
        self._connection.execute(self._table.delete())
        if self._rows:
            self._connection.execute(self._table.insert(), self._rows)

    def execute(self, sql: str) -> StatementResult:
        """Run one untrusted statement; refusals and failures come back as `error`."""
        try:
            statement = self._guard.check(sql)
        except StatementRejected as error:
            return StatementResult(error=str(error))
        with self._backend.statement_limit():
            return self._run(statement)

    def observe(self, sql: str) -> str:
        return self.execute(sql).observation(self.settings.max_rows_shown)

    def _run(self, statement: str) -> StatementResult:
        try:
            result = self._connection.exec_driver_sql(statement, execution_options=_NO_PARAMETERS)
            if not result.returns_rows:
                return StatementResult(rowcount=max(result.rowcount, 0))
            rows = result.fetchmany(_FETCH_LIMIT + 1)
            result.close()
        except SQLAlchemyError as error:
            cause = getattr(error, "orig", None) or error
            return StatementResult(error=str(cause).strip())
        return StatementResult(rows=tuple(tuple(plain_value(v) for v in row)
                                          for row in rows[:_FETCH_LIMIT]),
                               complete=len(rows) <= _FETCH_LIMIT)

    # ---- grading (trusted statements of our own) -----------------------------------
    def table_rows(self) -> list[tuple[Value, ...]] | None:
        """Every row of the problem's table now, or None if it cannot be read (dropped)."""
        result = self._run(f"SELECT * FROM {self.quote(self.table.name)}")
        return None if result.error is not None else list(result.rows or ())

    def table_md5(self) -> str | None:
        """AgentBench's MySQL hash of the table ("None" for an empty one); None elsewhere."""
        if self.dialect != "mysql":
            return None
        columns = ", ".join(self.quote(column.name) for column in self.table.columns)
        result = self._run(
            f"SELECT md5(group_concat(rowhash ORDER BY rowhash)) AS hash FROM (SELECT "
            f"substring(md5(concat_ws(',', {columns})), 1, 5) AS rowhash "
            f"FROM {self.quote(self.table.name)}) AS sub")
        if result.error is not None or not result.rows:
            return None
        return str(result.rows[0][0])

    def close(self) -> None:
        self._backend.close()
