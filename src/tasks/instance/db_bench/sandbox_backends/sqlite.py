"""The SQLite backend: a private in-memory database on one connection, with an authorizer
and SQLite's own bounds (a progress handler for the time limit, page counts for storage,
its length and column limits, a hard heap limit shared by the process's sandboxes, and
printf's widths checked before it runs)."""

from __future__ import annotations

import contextlib
import ctypes
import math
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import create_engine, make_url
from sqlalchemy.pool import NullPool

from src.tasks.instance.db_bench.sandbox_backends.base import Fetched, SandboxBackend, SandboxLimits
from src.tasks.instance.db_bench.sql_lexer import Dialect

# A row of N columns holds N values of up to max_value_bytes each: few columns bound it.
_SQLITE_MAX_COLUMNS = 200
_SQLITE_DENIED_ACTIONS = frozenset({sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH,
                                    sqlite3.SQLITE_PRAGMA, sqlite3.SQLITE_CREATE_VTABLE,
                                    sqlite3.SQLITE_DROP_VTABLE})
_SQLITE_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit",
                                      "fts3_tokenizer"})
# What one SQLite sandbox may hold in SQLite's heap beyond its main and temp databases
# (each max_storage_bytes at most): sorts and de-duplications (max_storage_bytes more) and
# this, for its schema, statements and page headers.
_SQLITE_HEAP_OVERHEAD = 8 * 1024 * 1024
# The heap that the process's other SQLite connections (a tracker's, say) may still take
# while sandboxes are open.
_SQLITE_HEAP_HEADROOM = 64 * 1024 * 1024
# A conversion of SQLite's printf: flags, width and precision (digits or `*`), length,
# type; a type that is no conversion ends the output, as it does in SQLite.
_PRINTF_SPEC = re.compile(r"%([-+ #0!,*.0-9l]*)(.?)", re.DOTALL)
_PRINTF_NO_ARGUMENT = frozenset("%n")


class _SqliteHeap:
    """SQLite's hard heap limit, one for the whole process: each open SQLite sandbox adds
    its budget to it and takes it back when it closes, so that together they hold at most
    that much (and the process's other SQLite connections at most _SQLITE_HEAP_HEADROOM
    more than they held when the first sandbox opened); an allocation past it fails the
    statement that asked for it. The bound is the process's, not a sandbox's: a statement
    that takes all of it makes other sandboxes' statements fail until it ends.

    sqlite3_hard_heap_limit64 is called through ctypes: Python's sqlite3 module does not
    expose it, and its PRAGMA can only lower the limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reserved = 0
        self._base = 0
        self._before = 0  # the limit before the first sandbox opened, given back after the last
        self._library: Any = None

    def reserve(self, budget: int) -> None:
        with self._lock:
            library = self._sqlite()
            if self._reserved == 0:
                self._before = library.sqlite3_hard_heap_limit64(-1)
                self._base = library.sqlite3_memory_used() + _SQLITE_HEAP_HEADROOM
            self._reserved += budget
            library.sqlite3_hard_heap_limit64(self._base + self._reserved)

    def release(self, budget: int) -> None:
        with self._lock:
            self._reserved -= budget
            self._sqlite().sqlite3_hard_heap_limit64(
                self._base + self._reserved if self._reserved else self._before)

    def _sqlite(self) -> Any:
        if self._library is None:
            import _sqlite3  # the library that the sqlite3 module calls, found through it

            try:
                library = ctypes.CDLL(_sqlite3.__file__)
                for name in ("sqlite3_hard_heap_limit64", "sqlite3_memory_used"):
                    function = getattr(library, name)
                    function.restype = ctypes.c_int64
                library.sqlite3_hard_heap_limit64.argtypes = [ctypes.c_int64]
            except (OSError, AttributeError) as error:
                raise RuntimeError(f"SQLite sandboxes bound their memory with "
                                   f"sqlite3_hard_heap_limit64 (SQLite 3.31+), which this "
                                   f"Python's SQLite ({sqlite3.sqlite_version}) does not "
                                   f"offer: {error}") from error
            self._library = library
        return self._library


_SQLITE_HEAP = _SqliteHeap()


class _BoundedPrintf:
    """SQLite's printf (alias format) with the widths and precisions of its conversions
    bounded before it runs: SQLite repeats a `%c` and pads a conversion in a loop that
    neither the progress handler nor an interrupt reaches, whatever the length limit
    (`printf('%.*c', 2147483647, 'x')`: 17 s). Their sum may be at most the value limit;
    the call itself runs on a private connection, the sandbox's own printf being this."""

    def __init__(self, max_value_bytes: int) -> None:
        self._limit = max_value_bytes
        self._printer = sqlite3.connect(":memory:", check_same_thread=False)
        self._printer.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)

    def __call__(self, *arguments: Any) -> Any:
        if arguments and isinstance(arguments[0], str | bytes):
            self._check(arguments)
        marks = ", ".join("?" * len(arguments))
        try:
            return self._printer.execute(f"SELECT printf({marks})", arguments).fetchone()[0]
        except sqlite3.DataError as error:
            raise OverflowError(str(error)) from error  # SQLite reports it as too big

    def _check(self, arguments: tuple[Any, ...]) -> None:
        """Consumes the arguments as SQLite does: a `*` takes the next one as a number, a
        conversion the next one; OverflowError when the widths add up past the limit."""
        text = arguments[0]
        fmt = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        values = iter(arguments[1:])
        total = 0
        for match in _PRINTF_SPEC.finditer(fmt):
            spec, kind = match.groups()
            sizes = [int(digits) for digits in re.findall(r"\d+", spec)]
            sizes += [abs(self._integer(next(values, None))) for _ in range(spec.count("*"))]
            if not kind or not (kind.isalpha() or kind in _PRINTF_NO_ARGUMENT):
                break  # SQLite ends its output at a type that is no conversion
            if kind not in _PRINTF_NO_ARGUMENT:
                next(values, None)
            total += max(sizes, default=0)
            if total > self._limit:
                raise OverflowError(f"printf widths add up to more than {self._limit}")

    def _integer(self, value: Any) -> int:
        """The value as SQLite's printf reads a `*` argument (text and reals converted)."""
        return int(self._printer.execute("SELECT CAST(? AS INTEGER)", (value,)).fetchone()[0]
                   or 0)

    def close(self) -> None:
        self._printer.close()


class SqliteBackend(SandboxBackend):
    dialect: Dialect = "sqlite"

    def __init__(self, url: str, limits: SandboxLimits) -> None:
        super().__init__(limits)
        if make_url(url).database not in (None, "", ":memory:"):
            raise ValueError(f"sandbox url '{url}': SQLite sandboxes live in memory, one per "
                             f"episode; use 'sqlite://'")
        self._deadline = math.inf
        self._engine = create_engine("sqlite://", poolclass=NullPool,
                                     isolation_level="AUTOCOMMIT")
        self.connection = self._engine.connect()
        raw = self.raw
        assert isinstance(raw, sqlite3.Connection)
        # Read first: an empty database forgets its max_page_count when it is first written.
        raw.execute("SELECT count(*) FROM main.sqlite_master").fetchall()
        page_size = raw.execute("PRAGMA page_size").fetchone()[0]
        pages = max(1, limits.max_storage_bytes // page_size)
        for database in ("main", "temp"):
            raw.execute(f"PRAGMA {database}.max_page_count = {pages}").fetchall()
        # Sorts and de-duplications keep their runs in SQLite's heap, under its limit,
        # instead of temporary files that no bound reaches.
        raw.execute("PRAGMA temp_store = MEMORY").fetchall()
        self._heap_budget = 3 * limits.max_storage_bytes + _SQLITE_HEAP_OVERHEAD
        _SQLITE_HEAP.reserve(self._heap_budget)
        self._printf = _BoundedPrintf(limits.max_value_bytes)
        for name in ("printf", "format"):
            raw.create_function(name, -1, self._printf, deterministic=True)
        raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
        raw.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, _SQLITE_MAX_COLUMNS)
        raw.set_authorizer(_sqlite_authorizer)
        raw.set_progress_handler(self._past_deadline, 1000)
        self._closed = False

    def _past_deadline(self) -> int:
        return int(time.monotonic() > self._deadline)  # non-zero interrupts the statement

    @contextlib.contextmanager
    def _time_limit(self) -> Iterator[threading.Event]:
        self._deadline = time.monotonic() + self.limits.statement_timeout_s
        try:
            with super()._time_limit() as interrupted:
                yield interrupted
        finally:
            self._deadline = math.inf

    def _execute(self, statement: str) -> Fetched:
        return self._execute_on_cursor(statement)

    def _shape_query(self, name: str) -> tuple[str, Sequence[Any]]:
        # The CREATE text, which ALTER TABLE keeps up to date, says which columns it has.
        return "SELECT type, sql FROM main.sqlite_master WHERE name = ?", (name,)

    def qualified(self, quoted_name: str) -> str:
        return f"main.{quoted_name}"

    def _interrupt(self) -> None:
        self.raw.interrupt()

    def _after_interrupt(self) -> None:
        """An interrupted SQLite statement leaves its connection as it was."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.connection.close()
        self._engine.dispose()
        self._printf.close()
        _SQLITE_HEAP.release(self._heap_budget)


def _sqlite_authorizer(action: int, first: str | None, second: str | None, database: str | None,
                       trigger: str | None) -> int:
    if action in _SQLITE_DENIED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (second or "").lower() in _SQLITE_DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK
