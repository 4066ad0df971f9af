"""Where one episode's table lives, per server kind, how the model's connection is confined,
and how one statement runs within the sandbox's bounds.

- SQLite: a private in-memory database on one connection, with an authorizer that
  refuses ATTACH/DETACH (which VACUUM INTO also needs), PRAGMA, virtual tables and the
  file functions.
- MySQL/MariaDB: a fresh database and a fresh user granted table privileges on it alone
  (no FILE, no other database); the connection logs in as that user into that database;
  the session runs without strict mode, as the benchmarks' SQL expects (see _configure).
- PostgreSQL: a fresh login role without privileges and a schema it owns, reached through
  the role's `search_path`, in a database of the sandbox's own (_PostgresDatabases):
  a database's catalogs list its own objects only, so no episode can list another's
  tables. On MySQL/MariaDB information_schema and SHOW list only what the user has
  privileges on; SQLite's database is the connection's own.
Both servers' namespaces and users are dropped when the sandbox closes (PostgreSQL's
database is kept, empty, for the next sandbox).

Every statement, the model's and the grader's reads alike, runs through `run` within
these bounds:
- time: the server bounds the statement (SQLite: a progress handler; MariaDB: the user's
  MAX_STATEMENT_TIME; MySQL: max_execution_time; PostgreSQL: the role's
  statement_timeout), settings the statement guard keeps the model from changing; a
  timer is the last bound: CANCEL_GRACE_S past the limit it interrupts SQLite or ends
  the server session, and the next statement reconnects.
- rows and characters read: results are streamed (SQLite steps lazily, MySQL through an
  unbuffered cursor, PostgreSQL in single-row mode), a row at a time, and reading stops
  after FETCH_ROWS rows or FETCH_CHARS characters of values (the rest is cancelled).
- value length (`max_value_bytes`): SQLite's SQLITE_LIMIT_LENGTH (and at most
  _SQLITE_MAX_COLUMNS result columns); MySQL's group_concat_max_len, its other string
  functions being bounded by the server's max_allowed_packet (a longer value read is an
  error, and a result whose columns could make rows of more than _MYSQL_MAX_ROW_BYTES is
  refused before a row is read); PostgreSQL, where no setting bounds a value (up to 1 GB
  of it reaches the client), reads a statement that returns rows through a WITH query
  that returns NULLs and a flag for a row whose text is longer than the bound, which is
  then an error.
- storage (`max_storage_bytes`): SQLite's max_page_count on its main and temp
  databases (a write past it fails); the servers' tables measured after each of the
  model's statements (`run_within_storage`): on PostgreSQL before the statement's own
  transaction commits, a statement past the bound being rolled back (what it wrote
  meanwhile is on the server's disk until then: as much as the server writes within the
  time limit), on MySQL once it has run; plus PostgreSQL's temp_file_limit for the role
  and MariaDB's max_heap_table_size and tmp_table_size for the session. MySQL's temporary tables,
  which the server does not measure, are not granted. SQLite keeps sorts in its heap
  (temp_store MEMORY) under a hard heap limit that every open SQLite sandbox adds its
  budget to (_SqliteHeap).
- value building: SQLite's printf/format widths (_BoundedPrintf) and PostgreSQL's
  padding, repetition, fills and joins (_POSTGRES_BUILDERS) are checked against
  max_value_bytes before the value is built: neither server interrupts such a call.
- place: MySQL's DATA/INDEX DIRECTORY are ignored (sql_mode NO_DIR_IN_CREATE).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import logging
import math
import re
import secrets
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, make_url
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from src.tasks.instance.db_bench.sql_lexer import Dialect

logger = logging.getLogger(__name__)

FETCH_ROWS = 10_000  # rows read from one result at most; the rest is only reported
FETCH_CHARS = 4_000_000  # characters of values read from one result at most
CANCEL_GRACE_S = 1.0  # past the time limit, the client ends a statement the server did not
_PREFIX = "dbbench_"
# A row of N columns holds N values of up to max_value_bytes each: few columns bound it.
_SQLITE_MAX_COLUMNS = 200
# MySQL's values are bounded by max_allowed_packet only (16-64 MB), so a row of many such
# columns could be huge: a result whose columns' declared sizes, each at most that, add up
# to more is refused before a row is read (a table of TEXT columns declares 256 KB each).
_MYSQL_MAX_ROW_BYTES = 32 * 1024 * 1024
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
# No CREATE TEMPORARY TABLES: the server does not say how big a temporary table is, and
# one of the table's name hides the table from the grader, qualified or not.
_MYSQL_PRIVILEGES = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, CREATE VIEW, "
                     "SHOW VIEW")
_MYSQL_STRICT_MODES = frozenset({"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"})
# The server ignores DATA DIRECTORY and INDEX DIRECTORY (tables, partitions, ALTER TABLE):
# a table's files stay in the sandbox's database folder.
_MYSQL_ADDED_MODES = ("NO_DIR_IN_CREATE",)
# PostgreSQL functions that build a value whose size an argument decides, without looking
# for a cancel request while they build it (lpad('a', 300000000): 5 s past a 0.5 s
# statement_timeout): name, argument types, and the bytes they would build at most, a
# plpgsql expression over $1, $2, ... Each is shadowed, in the sandbox's bounds schema
# (searched before pg_catalog), by one that refuses a larger value before it is built.
# format()'s widths, VARIADIC and padded types' lengths are the statement guard's.
_CELLS = ("(SELECT COALESCE(pg_catalog.exp(pg_catalog.sum(pg_catalog.ln(GREATEST(d, 1)))), 1) "
          "FROM pg_catalog.unnest($2) AS d)")
_ALL_MATCHES = ("(pg_catalog.char_length($1) + 1) * (pg_catalog.octet_length($3) + "
                "pg_catalog.octet_length($1) * (pg_catalog.octet_length($3) - "
                "pg_catalog.octet_length(pg_catalog.replace($3, '\\', ''))))")
_WIDEST_FILL = ("pg_catalog.ceil(pg_catalog.octet_length($3)::numeric / "
                "GREATEST(pg_catalog.char_length($3), 1))")
_VOLATILITY = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}
_POSTGRES_BUILDERS: tuple[tuple[str, str, str], ...] = (
    ("repeat", "text, integer", "pg_catalog.octet_length($1)::numeric * $2"),
    ("lpad", "text, integer", "$2::numeric"),
    ("rpad", "text, integer", "$2::numeric"),
    ("lpad", "text, integer, text", f"$2::numeric * {_WIDEST_FILL}"),
    ("rpad", "text, integer, text", f"$2::numeric * {_WIDEST_FILL}"),
    ("array_fill", "anyelement, integer[]",
     f"{_CELLS}::numeric * GREATEST(COALESCE(pg_catalog.pg_column_size($1), 0), 1)"),
    ("array_fill", "anyelement, integer[], integer[]",
     f"{_CELLS}::numeric * GREATEST(COALESCE(pg_catalog.pg_column_size($1), 0), 1)"),
    ("replace", "text, text, text",
     "pg_catalog.octet_length($1) + pg_catalog.octet_length($1)::numeric / "
     "GREATEST(pg_catalog.octet_length($2), 1) * "
     "GREATEST(pg_catalog.octet_length($3) - pg_catalog.octet_length($2), 0)"),
    # one match, or (a flag, a start, an occurrence) possibly all: each replaced by the
    # replacement, whose back references (a backslash and a digit or &) may each copy the
    # whole text
    ("regexp_replace", "text, text, text",
     "pg_catalog.octet_length($1) + pg_catalog.octet_length($3) + pg_catalog.octet_length($1) "
     "* (pg_catalog.octet_length($3) - pg_catalog.octet_length(pg_catalog.replace($3, '\\', "
     "'')))::numeric"),
    ("regexp_replace", "text, text, text, text", f"{_ALL_MATCHES}::numeric"),
    ("regexp_replace", "text, text, text, integer", f"{_ALL_MATCHES}::numeric"),
    ("regexp_replace", "text, text, text, integer, integer", f"{_ALL_MATCHES}::numeric"),
    ("regexp_replace", "text, text, text, integer, integer, text", f"{_ALL_MATCHES}::numeric"),
    # the elements as text (at most 4 bytes of it per stored byte) and a separator between each
    ("array_to_string", "anyarray, text",
     "pg_catalog.pg_column_size($1)::numeric * 4 + pg_catalog.cardinality($1)::numeric * "
     "pg_catalog.octet_length($2)"),
    ("array_to_string", "anyarray, text, text",
     "pg_catalog.pg_column_size($1)::numeric * 4 + pg_catalog.cardinality($1)::numeric * "
     "(COALESCE(pg_catalog.octet_length($2), 0) + COALESCE(pg_catalog.octet_length($3), 0))"),
    ("bpchar", "character, integer, boolean", "$2::numeric"),
    ("bit", "bit, integer, boolean", "$2::numeric / 8"),
    ("bit", "integer, integer", "$2::numeric / 8"),
    ("bit", "bigint, integer", "$2::numeric / 8"),
)


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


def dialect_of(url: str) -> Dialect:
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return "sqlite"
    if backend in ("mysql", "mariadb"):
        return "mysql"
    if backend == "postgresql":
        return "postgresql"
    raise ValueError(f"sandbox url '{url}': unsupported backend '{backend}' "
                     f"(use sqlite://, mysql+pymysql://... or postgresql+psycopg://...)")


def open_backend(url: str, limits: SandboxLimits) -> SandboxBackend:
    dialect = dialect_of(url)
    if dialect == "sqlite":
        return SqliteBackend(url, limits)
    if dialect == "mysql":
        return MysqlBackend(url, limits)
    return PostgresBackend(url, limits)


@functools.cache
def admin_engine(url: str) -> Engine:
    """One engine per server URL, shared by the sandboxes that it creates and drops."""
    return create_engine(url, pool_pre_ping=True, isolation_level="AUTOCOMMIT",
                         execution_options={"no_parameters": True})


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


def _shown(url: str) -> str:
    """The URL for a message, its password hidden."""
    return make_url(url).render_as_string(hide_password=True)


def _failure_message(error: BaseException) -> str:
    """What a failed statement tells the agent; SQLite's allocation past its heap limit
    comes as a MemoryError without a message."""
    if isinstance(error, MemoryError):
        return "out of memory: the statement needed more than the sandbox's memory bound"
    return str(error).strip()


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


class _ServerBackend(SandboxBackend):
    """A namespace and a user on a shared server, created now and dropped by close()."""

    def __init__(self, url: str, limits: SandboxLimits) -> None:
        super().__init__(limits)
        self.url = url
        self.name = _PREFIX + secrets.token_hex(6)
        self._password = secrets.token_hex(16)
        self._admin = self._admin_engine(url)
        self._engine: Engine | None = None
        self._closed = False
        try:
            with self._admin.connect() as admin:
                self._create(admin)
                self.foreign_namespaces = frozenset(
                    name.lower() for name in self._namespaces(admin) if name != self.name)
            self._engine = create_engine(self._user_url(make_url(url)), poolclass=NullPool,
                                         isolation_level="AUTOCOMMIT")
            self._connect()
            self.storage_exceeded()  # its queries need privileges: missing ones fail here
        except Exception as error:
            self.close()
            raise RuntimeError(f"could not create a {self.dialect} sandbox on {_shown(url)}: "
                               f"{error}") from error

    def _connect(self) -> None:
        assert self._engine is not None
        self.connection = self._engine.connect()
        self._session = self._configure()

    def _admin_engine(self, url: str) -> Engine:
        """The engine that creates, measures and drops the sandbox's namespace and user."""
        return admin_engine(url)

    @abstractmethod
    def _create(self, admin: Connection) -> None: ...

    @abstractmethod
    def _namespaces(self, admin: Connection) -> list[str]: ...

    @abstractmethod
    def _user_url(self, url: URL) -> URL: ...

    @abstractmethod
    def _configure(self) -> int:
        """Session settings of the model's connection; returns the server's id of the session."""

    @abstractmethod
    def _end_session_sql(self, session: int) -> str:
        """What the admin runs to end the model's session (it frees a blocked server too)."""

    @abstractmethod
    def _drop(self, admin: Connection) -> None: ...

    def _interrupt(self) -> None:
        try:
            with self._admin.connect() as admin:
                admin.exec_driver_sql(self._end_session_sql(self._session))
        except Exception:  # the server-side limit may yet hold; the run must go on
            logger.exception("could not end the session of sandbox %s", self.name)

    def _after_interrupt(self) -> None:
        with contextlib.suppress(Exception):
            self.connection.invalidate()  # the session is gone: nothing to reset or roll back
            self.connection.close()
        self._connect()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._engine is not None:
            with contextlib.suppress(Exception):
                self.connection.close()
            self._engine.dispose()
        try:
            with self._admin.connect() as admin:
                self._drop(admin)
        except Exception:  # a sandbox left behind must not end the run; it is logged
            logger.exception("could not drop sandbox %s", self.name)
        self._after_drop()

    def _after_drop(self) -> None:
        """What is left to do once the namespace and user are dropped (or failed to be)."""


class MysqlBackend(_ServerBackend):
    dialect: Dialect = "mysql"

    def _create(self, admin: Connection) -> None:
        # MariaDB pins the time limit to the user: every session of it starts bounded.
        bound = (f" WITH MAX_STATEMENT_TIME {self.limits.statement_timeout_s:.3f}"
                 if getattr(admin.dialect, "is_mariadb", False) else "")
        admin.exec_driver_sql(f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4")
        admin.exec_driver_sql(f"CREATE USER '{self.name}'@'%' IDENTIFIED BY "
                              f"'{self._password}'{bound}")
        admin.exec_driver_sql(f"GRANT {_MYSQL_PRIVILEGES} ON `{self.name}`.* "
                              f"TO '{self.name}'@'%'")

    def _namespaces(self, admin: Connection) -> list[str]:
        return [row[0] for row in admin.exec_driver_sql("SHOW DATABASES")]

    def _user_url(self, url: URL) -> URL:
        return url.set(username=self.name, password=self._password, database=self.name)

    def _configure(self) -> int:
        limits = self.limits
        settings = [f"group_concat_max_len = {limits.max_value_bytes}",
                    f"max_heap_table_size = {limits.max_storage_bytes}",
                    f"tmp_table_size = {limits.max_storage_bytes}"]
        if not getattr(self.connection.dialect, "is_mariadb", False):
            # MySQL bounds SELECT statements only, per session
            settings.append(f"max_execution_time = "
                            f"{max(1, round(limits.statement_timeout_s * 1000))}")
        # The benchmarks' SQL compares text columns with numbers (`WHERE Year = 2015` where
        # a row holds '2010–11'): MySQL compares them as numbers and warns about the text
        # that is no number, but strict mode turns the warning into an error that fails
        # the UPDATE ("Truncated incorrect DECIMAL value"). Only the strict flags go.
        modes = self.connection.exec_driver_sql("SELECT @@SESSION.sql_mode").scalar_one()
        relaxed = ",".join([mode for mode in modes.split(",")
                            if mode and mode not in _MYSQL_STRICT_MODES and
                            mode not in _MYSQL_ADDED_MODES] + list(_MYSQL_ADDED_MODES))
        settings.append(f"sql_mode = '{relaxed}'")
        self.connection.exec_driver_sql(f"SET SESSION {', '.join(settings)}")
        self._packet_bytes = int(self.connection.exec_driver_sql(
            "SELECT @@max_allowed_packet").scalar_one())
        return int(self.raw.thread_id())

    def _end_session_sql(self, session: int) -> str:
        return f"KILL CONNECTION {session}"

    def qualified(self, quoted_name: str) -> str:
        return f"`{self.name}`.{quoted_name}"

    def _execute(self, statement: str) -> Fetched:
        from pymysql.cursors import SSCursor  # the mysql extra's driver, present here

        cursor = self.raw.cursor(SSCursor)
        unread = False  # rows left on the wire, which closing the cursor would read
        ended = False  # the session, ended rather than read a row that may be huge
        try:
            cursor.execute(statement)
            row_bytes = sum(min(column[3] or 0, self._packet_bytes)
                            for column in cursor.description or ())
            if row_bytes > _MYSQL_MAX_ROW_BYTES:
                ended = True
                self._interrupt()
                raise StatementFailed(f"the result's rows could hold {row_bytes} bytes, more "
                                      f"than the sandbox reads ({_MYSQL_MAX_ROW_BYTES})")
            unread = cursor.description is not None
            fetched = self._cursor_result(cursor)
            unread = not fetched.complete
            return fetched
        finally:
            if ended:
                # Nothing is left to read on the ended session; pymysql would try anyway,
                # and again when it collects the result.
                cursor._result.unbuffered_active = False
                self._after_interrupt()
            else:
                if unread:
                    self._stop_query()
                with contextlib.suppress(self.connection.dialect.loaded_dbapi.Error):
                    cursor.close()

    def _stop_query(self) -> None:
        """End the statement still sending rows, keeping the session (and its temporary
        tables); MariaDB names the statement, MySQL only the session."""
        with self._admin.connect() as admin:
            if not getattr(admin.dialect, "is_mariadb", False):
                admin.exec_driver_sql(f"KILL QUERY {self._session}")
                return
            query = admin.exec_driver_sql(
                f"SELECT QUERY_ID FROM information_schema.PROCESSLIST WHERE ID = "
                f"{self._session} AND COMMAND = 'Query'").scalar()
            if query is not None:
                with contextlib.suppress(Exception):  # it ended meanwhile
                    admin.exec_driver_sql(f"KILL QUERY ID {int(query)}")

    def _shape_query(self, name: str) -> tuple[str, Sequence[Any]]:
        return ("SELECT t.TABLE_TYPE, c.COLUMN_NAME, c.COLUMN_TYPE "
                "FROM information_schema.TABLES t LEFT JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = t.TABLE_SCHEMA "
                "AND c.TABLE_NAME = t.TABLE_NAME WHERE t.TABLE_SCHEMA = DATABASE() "
                "AND t.TABLE_NAME = %s ORDER BY c.ORDINAL_POSITION", (name,))

    def storage_exceeded(self) -> bool:
        # InnoDB's files as allocated now (its table statistics lag behind), other engines'
        # tables (MEMORY, Aria, ...) as the server counts them; read as admin (PROCESS).
        with self._admin.connect() as admin:
            spaces = ("INNODB_SYS_TABLESPACES" if getattr(admin.dialect, "is_mariadb", False)
                      else "INNODB_TABLESPACES")
            stored = admin.exec_driver_sql(
                f"SELECT (SELECT COALESCE(SUM(ALLOCATED_SIZE), 0) FROM "
                f"information_schema.{spaces} WHERE NAME LIKE '{self.name}/%') + "
                f"(SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) FROM "
                f"information_schema.TABLES WHERE TABLE_SCHEMA = '{self.name}' "
                f"AND ENGINE <> 'InnoDB')").scalar_one()
        return int(stored) > self.limits.max_storage_bytes

    def _drop(self, admin: Connection) -> None:
        admin.exec_driver_sql(f"DROP DATABASE IF EXISTS `{self.name}`")
        admin.exec_driver_sql(f"DROP USER IF EXISTS '{self.name}'@'%'")


# A database's objects that someone made have OIDs from FirstNormalObjectId on (initdb's
# own are below it): a database given back with none in these catalogs, but the bounds
# schemas that it keeps for the next sandboxes, holds nothing of its last sandbox's.
# Temporary schemas stay once made (empty when their session ends).
_FIRST_NORMAL_OID = 16384
_POSTGRES_BOUNDS_PREFIX = f"{_PREFIX}bounds_"
_POSTGRES_KEPT_SCHEMAS = (f"(SELECT oid FROM pg_catalog.pg_namespace WHERE nspname LIKE "
                          f"'{_POSTGRES_BOUNDS_PREFIX.replace('_', chr(92) + '_')}%')")
_POSTGRES_OBJECT_CATALOGS = (
    "pg_class", "pg_type", "pg_constraint", "pg_trigger", "pg_rewrite", "pg_policy",
    "pg_operator", "pg_opclass", "pg_opfamily", "pg_cast", "pg_collation", "pg_conversion",
    "pg_language", "pg_extension", "pg_largeobject_metadata", "pg_default_acl",
    "pg_statistic_ext", "pg_publication", "pg_ts_config", "pg_ts_dict", "pg_event_trigger",
    "pg_foreign_data_wrapper", "pg_foreign_server")
_POSTGRES_LEFT_OBJECTS = " + ".join(
    [f"(SELECT count(*) FROM pg_catalog.{catalog} WHERE oid >= {_FIRST_NORMAL_OID})"
     for catalog in _POSTGRES_OBJECT_CATALOGS]
    + [f"(SELECT count(*) FROM pg_catalog.pg_proc WHERE oid >= {_FIRST_NORMAL_OID} "
       f"AND pronamespace NOT IN {_POSTGRES_KEPT_SCHEMAS})",
       f"(SELECT count(*) FROM pg_catalog.pg_namespace WHERE oid >= {_FIRST_NORMAL_OID} "
       f"AND nspname !~ '^pg_(toast_)?temp_' AND oid NOT IN {_POSTGRES_KEPT_SCHEMAS})"])
# The tables and materialised views of the sandbox's role, temporary ones included.
_POSTGRES_OWN_RELATIONS = ("FROM pg_catalog.pg_class WHERE relowner = (SELECT oid FROM "
                           "pg_catalog.pg_roles WHERE rolname = current_user) "
                           "AND relkind IN ('r', 'm', 'p')")


class _PostgresDatabases:
    """The databases of one PostgreSQL server that its sandboxes live in, one per open
    sandbox: a database's catalogs (pg_class, pg_namespace, information_schema, its
    statistics views) list its own objects only, so no episode can list another's tables,
    as it could were each only a schema. A database is made from template0 with the
    encoding and locale of the URL's database (text sorts and compares as it would there)
    and only the sandbox's role may connect to it. Making and dropping one take 50-150 ms
    each, so a closed sandbox's database, once its schema and role are dropped and it holds
    no object made in it but its bounds schemas (the admin's, one per value limit), waits
    for the next sandbox; one that still holds something is dropped, and so are the
    waiting ones when the process exits."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._idle: list[str] = []
        self._engines: dict[str, Engine] = {}
        atexit.register(self.drop_idle)

    def acquire(self) -> str:
        """A database of no other open sandbox's, made now if none waits."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        name = f"{_PREFIX}db_{secrets.token_hex(6)}"
        with admin_engine(self._url).connect() as admin:
            admin.exec_driver_sql(f"CREATE DATABASE {name} TEMPLATE template0 "
                                  f"{self._locale(admin)}")
            admin.exec_driver_sql(f"REVOKE ALL ON DATABASE {name} FROM PUBLIC")
        return name

    def engine(self, name: str) -> Engine:
        """The admin's engine on database `name`: a connection per use (a sandbox makes two,
        some 10 ms each), none held between them, to keep the server's connections few."""
        with self._lock:
            if name not in self._engines:
                self._engines[name] = create_engine(
                    make_url(self._url).set(database=name), poolclass=NullPool,
                    isolation_level="AUTOCOMMIT", execution_options={"no_parameters": True})
            return self._engines[name]

    @staticmethod
    def objects_left(admin: Connection) -> int:
        """How many objects made in admin's database are left, but the bounds schemas."""
        return int(admin.exec_driver_sql(f"SELECT {_POSTGRES_LEFT_OBJECTS}").scalar_one())

    def release(self, name: str, empty: bool) -> None:
        """Database `name`'s sandbox is closed: kept for the next if `empty` (nothing but
        the bounds schemas is left in it), else dropped."""
        if empty:
            with self._lock:
                self._idle.append(name)
            return
        self._drop(name)

    def drop_idle(self) -> None:
        with self._lock:
            names, self._idle = self._idle, []
        for name in names:
            self._drop(name)

    def _drop(self, name: str) -> None:
        with self._lock:
            engine = self._engines.pop(name, None)
        if engine is not None:
            engine.dispose()
        try:
            with admin_engine(self._url).connect() as admin:
                admin.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        except Exception:  # a database left behind must not end the run; it is logged
            logger.exception("could not drop database %s", name)

    @staticmethod
    def _locale(admin: Connection) -> str:
        """CREATE DATABASE's options for the encoding and locale of admin's database."""
        [row] = admin.exec_driver_sql(
            "SELECT pg_catalog.to_jsonb(d) FROM pg_catalog.pg_database d "
            "WHERE d.datname = pg_catalog.current_database()").scalars().all()
        encoding = admin.exec_driver_sql(
            f"SELECT pg_catalog.pg_encoding_to_char({int(row['encoding'])})").scalar_one()
        options = {"ENCODING": encoding, "LC_COLLATE": row["datcollate"],
                   "LC_CTYPE": row["datctype"]}
        if row.get("datlocprovider") == "i":  # ICU (PostgreSQL 15 on)
            options |= {"LOCALE_PROVIDER": "icu",
                        "ICU_LOCALE": row.get("daticulocale") or row.get("datlocale")}
        return " ".join(f"{key} '{str(value).replace(chr(39), chr(39) * 2)}'"
                        if key != "LOCALE_PROVIDER" else f"{key} {value}"
                        for key, value in options.items())


_POSTGRES_DATABASES: dict[str, _PostgresDatabases] = {}
_POSTGRES_DATABASES_LOCK = threading.Lock()


def _postgres_databases(url: str) -> _PostgresDatabases:
    with _POSTGRES_DATABASES_LOCK:
        if url not in _POSTGRES_DATABASES:
            _POSTGRES_DATABASES[url] = _PostgresDatabases(url)
        return _POSTGRES_DATABASES[url]


def drop_kept_databases() -> None:
    """Drop the PostgreSQL databases kept for the next sandboxes now rather than when the
    process exits (a check that nothing is left on a server counts them)."""
    with _POSTGRES_DATABASES_LOCK:
        pools = list(_POSTGRES_DATABASES.values())
    for pool in pools:
        pool.drop_idle()


class PostgresBackend(_ServerBackend):
    dialect: Dialect = "postgresql"

    def __init__(self, url: str, limits: SandboxLimits) -> None:
        self._databases = _postgres_databases(url)
        self._emptied = False  # _drop found nothing left in the database
        try:
            self.database = self._databases.acquire()
        except Exception as error:
            raise RuntimeError(f"could not create a {self.dialect} sandbox on {_shown(url)}: "
                               f"no database of its own: {error}") from error
        super().__init__(url, limits)

    def _admin_engine(self, url: str) -> Engine:
        return self._databases.engine(self.database)

    def _after_drop(self) -> None:
        self._databases.release(self.database, empty=self._emptied)

    @property
    def _bounds(self) -> str:
        """The admin's schema of bounded value builders, searched before pg_catalog; kept
        in the database for the next sandboxes of the same value limit."""
        return f"{_POSTGRES_BOUNDS_PREFIX}{self.limits.max_value_bytes}"

    def _create(self, admin: Connection) -> None:
        limits = self.limits
        admin.exec_driver_sql(f"CREATE ROLE {self.name} LOGIN PASSWORD '{self._password}' "
                              f"NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT")
        admin.exec_driver_sql(f"GRANT CONNECT, TEMPORARY ON DATABASE {self.database} "
                              f"TO {self.name}")
        admin.exec_driver_sql(f"CREATE SCHEMA {self.name} AUTHORIZATION {self.name}")
        self._grant_bounds(admin)
        # The role's own settings: every session of it starts with them; temp_file_limit
        # (a bound on spilled sorts and hashes) only a superuser can change. pg_catalog
        # comes last, after the bounded builders that shadow its own (the sandbox's
        # statements to the catalog are qualified: a table of the model's may shadow it
        # too). row_security off: a query that row-level security would filter (a table
        # forced to it) fails instead of reading fewer rows, the grader's included.
        for setting in (f"search_path = {self.name}, {self._bounds}, pg_catalog",
                        f"statement_timeout = {max(1, round(limits.statement_timeout_s * 1000))}",
                        f"temp_file_limit = {max(1, limits.max_storage_bytes // 1024)}",
                        "row_security = off"):
            admin.exec_driver_sql(f"ALTER ROLE {self.name} SET {setting}")

    def _grant_bounds(self, admin: Connection) -> None:
        """The bounds schema, made if the database has none yet, for the role to use."""
        if admin.exec_driver_sql(f"SELECT 1 FROM pg_catalog.pg_namespace "
                                 f"WHERE nspname = '{self._bounds}'").first() is None:
            admin.exec_driver_sql(f"CREATE SCHEMA {self._bounds}")
            self._create_builders(admin)
        admin.exec_driver_sql(f"GRANT USAGE ON SCHEMA {self._bounds} TO {self.name}")

    def _create_builders(self, admin: Connection) -> None:
        """_POSTGRES_BUILDERS, each as strict and as volatile as the server's own."""
        limit = self.limits.max_value_bytes
        for name, arguments, size in _POSTGRES_BUILDERS:
            found = admin.exec_driver_sql(
                f"SELECT p.proisstrict, p.provolatile, pg_catalog.format_type(p.prorettype, "
                f"NULL) FROM pg_catalog.pg_proc p WHERE p.oid = pg_catalog.to_regprocedure("
                f"'pg_catalog.\"{name}\"({arguments})')").first()
            if found is None:  # not in this server's version
                continue
            strict, volatility, result = found
            calls = ", ".join(f"${index}" for index in range(1, arguments.count(",") + 2))
            admin.exec_driver_sql(
                f"CREATE FUNCTION {self._bounds}.\"{name}\"({arguments}) RETURNS {result} "
                f"LANGUAGE plpgsql {_VOLATILITY[volatility]} {'STRICT' if strict else ''} "
                f"PARALLEL SAFE AS $bounded$ DECLARE size numeric := {size}; BEGIN "
                f"IF size > {limit} THEN RAISE EXCEPTION USING ERRCODE = "
                f"'program_limit_exceeded', MESSAGE = '{name}() would build a value of ' || "
                f"pg_catalog.round(size) || ' bytes, more than the sandbox''s limit "
                f"({limit})'; END IF; RETURN pg_catalog.\"{name}\"({calls}); END $bounded$")

    def _namespaces(self, admin: Connection) -> list[str]:
        return [row[0] for row in admin.exec_driver_sql("SELECT nspname FROM pg_namespace")]

    def _user_url(self, url: URL) -> URL:
        return url.set(username=self.name, password=self._password, database=self.database)

    def _configure(self) -> int:
        return int(self.raw.info.backend_pid)

    def _end_session_sql(self, session: int) -> str:
        return f"SELECT pg_terminate_backend({session})"

    def qualified(self, quoted_name: str) -> str:
        return f"{self.name}.{quoted_name}"

    def _execute(self, statement: str) -> Fetched:
        columns = self._columns(statement)
        if statement.split(None, 1)[0].upper() == "EXPLAIN":
            return self._execute_on_cursor(statement)  # a plan, as long as the statement's own text
        bounded = self._bounded(statement, columns)
        # no columns: a query of none (SELECT FROM t) has rows, DDL, DML without RETURNING
        # and SELECT INTO have none, which the WITH query cannot stand
        error = self._prepare(bounded) if columns else self._try_prepare(bounded)
        if error is None:
            return self._stream(bounded)
        if not columns:  # DDL, DML without RETURNING, SELECT INTO: no rows to read
            return self._execute_on_cursor(statement)
        raise StatementFailed(f"{error.diag.message_primary} (the sandbox reads a result "
                              f"through a WITH query, where this statement cannot stand)")

    def _stream(self, bounded: str) -> Fetched:
        import psycopg  # the postgres extra's driver, present here

        try:
            with contextlib.closing(self.raw.cursor().stream(bounded)) as rows:
                return self._fetched(self._within_bound(rows))
        except psycopg.Error as error:  # its position would point into the WITH query
            raise StatementFailed(error.diag.message_primary or str(error)) from error

    def _columns(self, statement: str) -> int:
        """How many columns the statement's result has (0: none), from the server's parse."""
        from psycopg import errors, pq

        error = self._prepare(statement)
        if error is not None:
            raise error
        raw = self.raw
        described = raw.pgconn.describe_prepared(b"")
        if described.status != pq.ExecStatus.COMMAND_OK:
            raise errors.error_from_result(described, encoding=raw.info.encoding)
        return int(described.nfields)

    def _prepare(self, statement: str) -> Any:
        """The error (a psycopg.Error) of parsing `statement` as the unnamed prepared
        statement; None if it parses."""
        from psycopg import errors, pq

        raw = self.raw
        prepared = raw.pgconn.prepare(b"", statement.encode(raw.info.encoding))
        if prepared.status == pq.ExecStatus.COMMAND_OK:
            return None
        return errors.error_from_result(prepared, encoding=raw.info.encoding)

    def _try_prepare(self, statement: str) -> Any:
        """`_prepare` in a savepoint that a failure rolls back: a statement that does not
        parse aborts the transaction it is in."""
        from psycopg.pq import TransactionStatus

        raw = self.raw
        if raw.info.transaction_status != TransactionStatus.INTRANS:
            return self._prepare(statement)
        raw.execute("SAVEPOINT _sandbox_trial")
        error = self._prepare(statement)
        raw.execute("ROLLBACK TO SAVEPOINT _sandbox_trial" if error is not None
                    else "RELEASE SAVEPOINT _sandbox_trial")
        return error

    def _bounded(self, statement: str, columns: int) -> str:
        """The statement read through a WITH query: at most FETCH_ROWS + 1 rows, and a row
        whose text is longer than max_value_bytes comes back as NULLs with its flag set."""
        names = [f"_c{index}" for index in range(1, columns + 1)]
        aliases = f"({', '.join(names)})" if names else ""
        values = "".join(f"CASE WHEN _sandbox_size.over THEN NULL ELSE {name} END, "
                         for name in names)
        return (f"WITH _sandbox_result{aliases} AS ({statement}\n) SELECT {values}"
                f"_sandbox_size.over FROM _sandbox_result, LATERAL (SELECT "
                f"pg_catalog.octet_length(_sandbox_result::pg_catalog.text) > "
                f"{self.limits.max_value_bytes} AS over) AS _sandbox_size LIMIT {FETCH_ROWS + 1}")

    def _within_bound(self, rows: Iterator[Sequence[Any]]) -> Iterator[Sequence[Any]]:
        for row in rows:
            if row[-1]:
                raise StatementFailed(f"a row of the result is longer than "
                                      f"{self.limits.max_value_bytes} bytes, the sandbox's limit")
            yield row[:-1]

    def _shape_query(self, name: str) -> tuple[str, Sequence[Any]]:
        return ("SELECT c.relkind, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) "
                "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                "ON n.oid = c.relnamespace LEFT JOIN pg_catalog.pg_attribute a "
                "ON a.attrelid = c.oid AND a.attnum > 0 "
                "AND NOT a.attisdropped WHERE n.nspname = %s AND c.relname = %s "
                "ORDER BY a.attnum", (self.name, name))

    def storage_exceeded(self) -> bool:
        # with their TOAST tables and indexes; in the statement's transaction, the tables
        # that it made and what it wrote count
        [(stored,)] = self._catalog(
            f"SELECT COALESCE(pg_catalog.sum(pg_catalog.pg_total_relation_size(oid)), 0) "
            f"{_POSTGRES_OWN_RELATIONS}")
        return int(stored) > self.limits.max_storage_bytes

    def run_within_storage(self, statement: str) -> Fetched:
        """The statement in a transaction of its own, whose tables are measured before it
        commits: one that leaves them past the bound is rolled back and the space it took
        given back (VACUUM FULL) before StorageExceeded. Until then what it wrote is on the
        server's disk: as much as the server writes within the time limit."""
        from psycopg.pq import TransactionStatus

        self._catalog("BEGIN")
        failure: StatementFailed | None = None
        try:
            fetched = self.run(statement)
        except StatementFailed as error:
            failure = error
        # A failed statement, or one whose result was cut (its rest cancelled), aborted the
        # transaction; a session ended at the time limit took it along.
        if self.raw.info.transaction_status == TransactionStatus.INERROR:
            self._catalog("ROLLBACK")
        if self._over_storage():
            with contextlib.suppress(StatementFailed):  # a session gone has rolled it back
                if self.raw.info.transaction_status != TransactionStatus.IDLE:
                    self._catalog("ROLLBACK")
                self._give_space_back()
            raise StorageExceeded
        if self.raw.info.transaction_status == TransactionStatus.INTRANS:
            self._catalog("COMMIT")  # StatementFailed: a deferred constraint is broken
        if failure is not None:
            raise failure
        return fetched

    def _give_space_back(self) -> None:
        """A rolled-back write leaves its pages in the tables (and indexes) it wrote to;
        VACUUM FULL rewrites them without."""
        tables = self._catalog(f"SELECT oid::pg_catalog.regclass::pg_catalog.text "
                               f"{_POSTGRES_OWN_RELATIONS}")
        if tables:
            self._catalog(f"VACUUM FULL {', '.join(name for (name,) in tables)}")

    def _drop(self, admin: Connection) -> None:
        admin.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
        role_exists = admin.exec_driver_sql(
            f"SELECT 1 FROM pg_roles WHERE rolname = '{self.name}'").first()
        if role_exists:
            admin.exec_driver_sql(f"DROP OWNED BY {self.name}")
            admin.exec_driver_sql(f"DROP ROLE {self.name}")
        self._emptied = self._databases.objects_left(admin) == 0
