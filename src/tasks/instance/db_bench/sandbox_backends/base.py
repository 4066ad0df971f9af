"""The contract every SQL sandbox backend keeps and the parts they share: a statement run
within the time limit (the last bound a timer's), its rows read up to FETCH_ROWS rows or
FETCH_CHARS characters, the storage bound checked after it, and the failures it raises
(see the package's docstring for each server's own bounds)."""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from src.tasks.instance.db_bench.sql_lexer import Dialect

FETCH_ROWS = 10_000  # rows read from one result at most; the rest is only reported
FETCH_CHARS = 4_000_000  # characters of values read from one result at most
CANCEL_GRACE_S = 1.0  # past the time limit, the client ends a statement the server did not


@dataclass(frozen=True)
class SandboxLimits:
    statement_timeout_s: float
    max_value_bytes: int
    max_storage_bytes: int


@dataclass(frozen=True)
class Fetched:
    """What a statement gave: rows as the driver returns them, or a row count."""

    rows: list[tuple[Any, ...]] | None = None  # None: the statement returns no rows
    complete: bool = True  # False: reading stopped at FETCH_ROWS or FETCH_CHARS
    rowcount: int = 0


class StatementFailed(Exception):
    """The database refused or failed the statement, or its result broke a bound; the
    message is for the agent."""


class StorageExceeded(Exception):
    """After a statement, the sandbox's tables hold more than max_storage_bytes (or could not
    be measured)."""


class SandboxBackend(ABC):
    dialect: Dialect
    connection: Connection  # the model's connection, in autocommit mode
    foreign_namespaces: frozenset[str] = frozenset()  # other databases/schemas, lower-cased

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits

    @property
    def raw(self) -> Any:
        """The driver's own connection under `connection`."""
        return self.connection.connection.dbapi_connection

    def run(self, statement: str) -> Fetched:
        """Run one statement within the sandbox's bounds; failures raise StatementFailed."""
        with self._time_limit() as interrupted:
            try:
                return self._execute(statement)
            except (self.connection.dialect.loaded_dbapi.Error, MemoryError) as error:
                if interrupted.is_set():
                    raise StatementFailed(f"the statement ran past the sandbox's time limit "
                                          f"({self.limits.statement_timeout_s:g} s) and was "
                                          f"ended") from error
                raise StatementFailed(_failure_message(error)) from error

    def table_shape(self, name: str) -> tuple[tuple[Any, ...], ...]:
        """What the catalog says of the base table `name` in the sandbox's own namespace
        (its kind and columns), to tell it from a view or a changed table; empty if none."""
        return tuple(self._catalog(*self._shape_query(name)))

    def qualified(self, quoted_name: str) -> str:
        """A quoted table name of the sandbox's own namespace, as no temporary table shadows it."""
        return quoted_name

    def storage_exceeded(self) -> bool:
        """The sandbox's tables hold more than max_storage_bytes (StatementFailed where they
        cannot be measured)."""
        return False

    def run_within_storage(self, statement: str) -> Fetched:
        """`run`, then the storage bound, measured after the statement (failed or not):
        StorageExceeded when the tables are past it, whatever the statement gave."""
        failure: StatementFailed | None = None
        try:
            fetched = self.run(statement)
        except StatementFailed as error:
            failure = error
        if self._over_storage():
            raise StorageExceeded
        if failure is not None:
            raise failure
        return fetched

    @abstractmethod
    def close(self) -> None:
        """Drop the namespace and its user; safe to call twice."""

    # ---- hooks ---------------------------------------------------------------------
    @abstractmethod
    def _execute(self, statement: str) -> Fetched: ...

    @abstractmethod
    def _shape_query(self, name: str) -> tuple[str, Sequence[Any]]: ...

    @abstractmethod
    def _interrupt(self) -> None:
        """Stop the running statement; called from the timer's thread."""

    @abstractmethod
    def _after_interrupt(self) -> None:
        """Make the connection usable again after `_interrupt`."""

    # ---- shared --------------------------------------------------------------------
    @contextlib.contextmanager
    def _time_limit(self) -> Iterator[threading.Event]:
        """Yields the event that the last bound set, having interrupted the statement."""
        lock, running, interrupted = threading.Lock(), True, threading.Event()

        def last_bound() -> None:
            with lock:
                if running:
                    interrupted.set()
                    self._interrupt()

        timer = threading.Timer(self.limits.statement_timeout_s + CANCEL_GRACE_S, last_bound)
        timer.daemon = True
        timer.start()
        try:
            yield interrupted
        finally:
            with lock:
                running = False
            timer.cancel()
            if interrupted.is_set():
                self._after_interrupt()

    def _over_storage(self) -> bool:
        try:
            return self.storage_exceeded()
        except StatementFailed:  # what cannot be measured counts as too much
            return True

    def _catalog(self, query: str,
                 parameters: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """The rows (none for a command) of a statement of ours about the sandbox, run on
        the model's connection within the time limit."""
        with self._time_limit():
            try:
                cursor = self.raw.cursor()
                try:
                    cursor.execute(query, parameters)
                    if cursor.description is None:
                        return []
                    return [tuple(row) for row in cursor.fetchall()]
                finally:
                    cursor.close()
            except (self.connection.dialect.loaded_dbapi.Error, MemoryError) as error:
                raise StatementFailed(_failure_message(error)) from error

    def _fetched(self, rows: Iterator[Sequence[Any]]) -> Fetched:
        """The rows of `rows` up to FETCH_ROWS rows or FETCH_CHARS characters of values."""
        taken: list[tuple[Any, ...]] = []
        characters = 0
        for row in rows:
            if len(taken) == FETCH_ROWS or characters >= FETCH_CHARS:
                return Fetched(rows=taken, complete=False)
            sizes = [len(value) for value in row if isinstance(value, str | bytes | bytearray)]
            if max(sizes, default=0) > self.limits.max_value_bytes:
                raise StatementFailed(f"a value of the result is longer than "
                                      f"{self.limits.max_value_bytes} bytes, the sandbox's limit")
            characters += sum(sizes)
            taken.append(tuple(row))
        return Fetched(rows=taken)

    def _execute_on_cursor(self, statement: str) -> Fetched:
        """The statement run on a plain DB-API cursor of the model's connection, its rows
        read within the fetch bounds."""
        cursor = self.raw.cursor()
        try:
            cursor.execute(statement)
            return self._cursor_result(cursor)
        finally:
            cursor.close()

    def _cursor_result(self, cursor: Any) -> Fetched:
        """A DB-API cursor's result after execute(), read a row at a time: a row may be big."""
        if cursor.description is None:
            return Fetched(rowcount=max(cursor.rowcount, 0))
        return self._fetched(iter(cursor.fetchone, None))


def _failure_message(error: BaseException) -> str:
    """What a failed statement tells the agent; SQLite's allocation past its heap limit
    comes as a MemoryError without a message."""
    if isinstance(error, MemoryError):
        return "out of memory: the statement needed more than the sandbox's memory bound"
    return str(error).strip()
