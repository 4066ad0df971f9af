"""Where one episode's table lives, per server kind, how the model's connection is confined,
and how one statement runs within the sandbox's bounds.

- SQLite: a private in-memory database on one connection, with an authorizer that
  refuses ATTACH/DETACH (which VACUUM INTO also needs), PRAGMA, virtual tables and the
  file functions.
- MySQL/MariaDB: a fresh database and a fresh user granted table privileges on it alone
  (no FILE, no other database); the connection logs in as that user into that database;
  the session runs without strict mode, as the benchmarks' SQL expects (see _configure).
- PostgreSQL: a fresh login role without privileges and a schema it owns, reached through
  the role's `search_path`.
Both servers' namespaces and users are dropped when the sandbox closes.

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
  databases (a write past it fails); the servers' tables measured after each statement
  (`storage_exceeded`), plus PostgreSQL's temp_file_limit for the role and MariaDB's
  max_heap_table_size and tmp_table_size for the session. Not measured: MySQL's
  temporary tables (the server does not say how big they are).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
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
_MYSQL_PRIVILEGES = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, CREATE VIEW, "
                     "SHOW VIEW, CREATE TEMPORARY TABLES")
_MYSQL_STRICT_MODES = frozenset({"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"})


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
            except self.connection.dialect.loaded_dbapi.Error as error:
                if interrupted.is_set():
                    raise StatementFailed(f"the statement ran past the sandbox's time limit "
                                          f"({self.limits.statement_timeout_s:g} s) and was "
                                          f"ended") from error
                raise StatementFailed(str(error).strip()) from error

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

    def _catalog(self, query: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of a query of ours about the sandbox, run on the model's connection
        within the time limit."""
        with self._time_limit():
            try:
                cursor = self.raw.cursor()
                try:
                    cursor.execute(query, parameters)
                    return [tuple(row) for row in cursor.fetchall()]
                finally:
                    cursor.close()
            except self.connection.dialect.loaded_dbapi.Error as error:
                raise StatementFailed(str(error).strip()) from error

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
        raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
        raw.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, _SQLITE_MAX_COLUMNS)
        raw.set_authorizer(_sqlite_authorizer)
        raw.set_progress_handler(self._past_deadline, 1000)

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
        self.connection.close()
        self._engine.dispose()


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
        self._admin = admin_engine(url)
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
            shown = make_url(url).render_as_string(hide_password=True)
            raise RuntimeError(f"could not create a {self.dialect} sandbox on {shown}: "
                               f"{error}") from error

    def _connect(self) -> None:
        assert self._engine is not None
        self.connection = self._engine.connect()
        self._session = self._configure()

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
        relaxed = ",".join(mode for mode in modes.split(",") if mode not in _MYSQL_STRICT_MODES)
        settings.append(f"sql_mode = '{relaxed}'")
        self.connection.exec_driver_sql(f"SET SESSION {', '.join(settings)}")
        self._packet_bytes = int(self.connection.exec_driver_sql(
            "SELECT @@max_allowed_packet").scalar_one())
        return int(self.raw.thread_id())

    def _end_session_sql(self, session: int) -> str:
        return f"KILL CONNECTION {session}"

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


class PostgresBackend(_ServerBackend):
    dialect: Dialect = "postgresql"

    def _create(self, admin: Connection) -> None:
        limits = self.limits
        admin.exec_driver_sql(f"CREATE ROLE {self.name} LOGIN PASSWORD '{self._password}' "
                              f"NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT")
        admin.exec_driver_sql(f"CREATE SCHEMA {self.name} AUTHORIZATION {self.name}")
        # The role's own settings: every session of it starts with them; temp_file_limit
        # (a bound on spilled sorts and hashes) only a superuser can change.
        for setting in (f"search_path = {self.name}",
                        f"statement_timeout = {max(1, round(limits.statement_timeout_s * 1000))}",
                        f"temp_file_limit = {max(1, limits.max_storage_bytes // 1024)}"):
            admin.exec_driver_sql(f"ALTER ROLE {self.name} SET {setting}")

    def _namespaces(self, admin: Connection) -> list[str]:
        return [row[0] for row in admin.exec_driver_sql("SELECT nspname FROM pg_namespace")]

    def _user_url(self, url: URL) -> URL:
        return url.set(username=self.name, password=self._password)

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
        error = self._prepare(bounded)
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

    def _bounded(self, statement: str, columns: int) -> str:
        """The statement read through a WITH query: at most FETCH_ROWS + 1 rows, and a row
        whose text is longer than max_value_bytes comes back as NULLs with its flag set."""
        names = [f"_c{index}" for index in range(1, columns + 1)]
        aliases = f"({', '.join(names)})" if names else ""
        values = "".join(f"CASE WHEN _sandbox_size.over THEN NULL ELSE {name} END, "
                         for name in names)
        return (f"WITH _sandbox_result{aliases} AS ({statement}\n) SELECT {values}"
                f"_sandbox_size.over FROM _sandbox_result, LATERAL (SELECT "
                f"octet_length(_sandbox_result::text) > {self.limits.max_value_bytes} AS over) "
                f"AS _sandbox_size LIMIT {FETCH_ROWS + 1}")

    def _within_bound(self, rows: Iterator[Sequence[Any]]) -> Iterator[Sequence[Any]]:
        for row in rows:
            if row[-1]:
                raise StatementFailed(f"a row of the result is longer than "
                                      f"{self.limits.max_value_bytes} bytes, the sandbox's limit")
            yield row[:-1]

    def _shape_query(self, name: str) -> tuple[str, Sequence[Any]]:
        return ("SELECT c.relkind, a.attname, format_type(a.atttypid, a.atttypmod) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                "AND NOT a.attisdropped WHERE n.nspname = %s AND c.relname = %s "
                "ORDER BY a.attnum", (self.name, name))

    def storage_exceeded(self) -> bool:
        # every table and materialised view the role owns, temporary ones included, with
        # their TOAST tables and indexes
        [(stored,)] = self._catalog(
            "SELECT COALESCE(SUM(pg_total_relation_size(oid)), 0) FROM pg_class WHERE "
            "relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user) "
            "AND relkind IN ('r', 'm', 'p')", ())
        return int(stored) > self.limits.max_storage_bytes

    def _drop(self, admin: Connection) -> None:
        admin.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
        role_exists = admin.exec_driver_sql(
            f"SELECT 1 FROM pg_roles WHERE rolname = '{self.name}'").first()
        if role_exists:
            admin.exec_driver_sql(f"DROP OWNED BY {self.name}")
            admin.exec_driver_sql(f"DROP ROLE {self.name}")
