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

This package: `open_backend` (here) opens the backend of a URL's server; `base` holds the
contract and the parts every backend shares, `server` what the two server backends share
(a namespace and a user, made and dropped); `sqlite`, `mysql` (MySQL and MariaDB) and
`postgresql` are one backend each, and `postgresql_databases` keeps the databases that
PostgreSQL sandboxes live in.
"""

from __future__ import annotations

from sqlalchemy import make_url

from src.tasks.instance.db_bench.sandbox_backends.base import SandboxBackend, SandboxLimits
from src.tasks.instance.db_bench.sandbox_backends.mysql import MysqlBackend
from src.tasks.instance.db_bench.sandbox_backends.postgresql import PostgresBackend
from src.tasks.instance.db_bench.sandbox_backends.sqlite import SqliteBackend
from src.tasks.instance.db_bench.sql_lexer import Dialect


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
