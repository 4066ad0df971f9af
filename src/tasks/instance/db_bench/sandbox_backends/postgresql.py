"""The PostgreSQL backend: a login role and a schema it owns in a database of the
sandbox's own, bounded value builders shadowing pg_catalog's, results read through a
WITH query that flags a row past the value limit, and each of the model's statements in a
transaction of its own that a storage past the bound rolls back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from src.tasks.instance.db_bench.sandbox_backends.base import (
    FETCH_ROWS,
    Fetched,
    SandboxLimits,
    StatementFailed,
    StorageExceeded,
)
from src.tasks.instance.db_bench.sandbox_backends.postgresql_databases import (
    _POSTGRES_BOUNDS_PREFIX,
    _postgres_databases,
)
from src.tasks.instance.db_bench.sandbox_backends.server import _ServerBackend, _shown
from src.tasks.instance.db_bench.sql_lexer import Dialect

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
# The tables and materialised views of the sandbox's role, temporary ones included.
_POSTGRES_OWN_RELATIONS = ("FROM pg_catalog.pg_class WHERE relowner = (SELECT oid FROM "
                           "pg_catalog.pg_roles WHERE rolname = current_user) "
                           "AND relkind IN ('r', 'm', 'p')")


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
