"""The sandbox: escape attempts come back as errors and leave other databases untouched;
statements are bounded in time, rows, value length, storage and observation length, even
where the model tries to lift a bound; the grader reads within the same bounds and only
the table as it was; sandboxes leave nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import create_engine, make_url

from src.tasks.instance.db_bench.problem import ColumnSpec, TableSpec
from src.tasks.instance.db_bench.sandbox import SandboxSettings, SqlSandbox
from src.tasks.instance.db_bench.sandbox_backends.base import CANCEL_GRACE_S
from src.tasks.instance.db_bench.sandbox_backends.postgresql_databases import drop_kept_databases
from tests.tasks.db_bench.conftest import canary_rows

T = TypeVar("T")
REPOSITORY = Path(__file__).resolve().parents[3]

TABLE = TableSpec(name="Team Scores", columns=(ColumnSpec(name="Team Name"),
                                               ColumnSpec(name="points", type="INT")),
                  rows=tuple((f"team {index}", index) for index in range(30)))
# Every column declared TEXT, as AgentBench declares them.
NUMBERS_AS_TEXT = TableSpec(
    name="Results", columns=tuple(ColumnSpec(name=name) for name in
                                  ("Game", "Score", "Code", "Season", "Note")),
    rows=(("38", "9.640", "007", "2010", None), ("39", "-0.5", "12", "2010–11", None),
          ("40", "10.25", "3", "2012", None), (None, "11", "4", "2013", None)))


def escape_attempts(backend: str, canary: str, tmp_path: Path) -> list[str]:
    """Statements that try to leave the sandbox; `canary` names the other database."""
    attempts = [
        f"DROP DATABASE {canary}",
        f"DROP TABLE {canary}.secret",
        f"INSERT INTO {canary}.secret VALUES ('pwned')",
        f"UPDATE {canary}.secret SET v = 'pwned'",
        f"DELETE FROM {canary}.secret",
        f"SELECT * FROM {canary}.secret",
        f"CREATE TABLE {canary}.intruder (v TEXT)",
        f"ATTACH DATABASE '{tmp_path / 'canary.db'}' AS other",
        "PRAGMA writable_schema = 1",
        "SELECT 1; DROP TABLE secret",
    ]
    if backend == "sqlite":
        attempts += [
            f"VACUUM INTO '{tmp_path / 'copy.db'}'",
            "SELECT load_extension('/tmp/evil')",
            "SELECT readfile('/etc/passwd')",
            "DETACH DATABASE main",
        ]
    elif backend == "mysql":
        attempts += [
            f"USE {canary}",
            "SELECT LOAD_FILE('/etc/passwd')",
            f"SELECT 1 INTO OUTFILE '{tmp_path / 'out.txt'}'",
            f"SELECT 1 INTO DUMPFILE '{tmp_path / 'dump.bin'}'",
            "LOAD DATA INFILE '/etc/passwd' INTO TABLE `Team Scores`",
            "GRANT ALL PRIVILEGES ON *.* TO CURRENT_USER",
            "SET GLOBAL max_connections = 1",
            "SET SESSION max_statement_time = 0",
            "CREATE DATABASE intruder",
            "CREATE USER intruder",
            f"RENAME TABLE `Team Scores` TO {canary}.stolen",
        ]
    else:
        attempts += [
            "SELECT pg_read_file('/etc/passwd')",
            "SELECT lo_import('/etc/passwd')",
            "COPY \"Team Scores\" TO '/tmp/out.txt'",
            "COPY \"Team Scores\" FROM PROGRAM 'id'",
            "SET ROLE postgres",
            f"SET search_path = {canary}",
            "SELECT set_config('statement_timeout', '0', false)",
            "CREATE SCHEMA intruder",
            "DO $$ BEGIN PERFORM 1; END $$",
            f"ALTER TABLE \"Team Scores\" SET SCHEMA {canary}",
        ]
    return attempts


def test_escape_attempts_are_error_observations(backend: str, sandbox_url: str, canary: str,
                                                tmp_path: Path) -> None:
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        for attempt in escape_attempts(backend, canary, tmp_path):
            observation = sandbox.observe(attempt)
            assert observation.startswith("Error: "), (attempt, observation)
        assert sandbox.observe("SELECT COUNT(*) FROM " + sandbox.quote(TABLE.name)) == "[(30,)]"
        # executable comments are dropped, not run: no file content comes back
        hidden = "SELECT 1 /*! , LOAD_FILE('/etc/passwd') */" if backend == "mysql" else \
            "SELECT 1 /* , pg_read_file('/etc/passwd') */"
        assert sandbox.observe(hidden) == "[(1,)]"
    finally:
        sandbox.close()
    assert canary_rows(backend, sandbox_url, canary, tmp_path) == [("intact",)]
    assert not (tmp_path / "copy.db").exists() and not (tmp_path / "out.txt").exists()


def test_the_database_refuses_what_the_guard_would_let_through(
        backend: str, sandbox_url: str, canary: str, tmp_path: Path) -> None:
    """Defence in depth: unguarded, the sandbox's own connection still cannot get out."""
    attempts = {
        "sqlite": [f"ATTACH DATABASE '{tmp_path / 'canary.db'}' AS other",
                   f"VACUUM INTO '{tmp_path / 'copy.db'}'", "PRAGMA writable_schema = 1",
                   "SELECT load_extension('/tmp/evil')"],
        "mysql": [f"SELECT * FROM {canary}.secret", f"INSERT INTO {canary}.secret VALUES ('x')",
                  f"DROP DATABASE {canary}", "SET GLOBAL max_connections = 1",
                  "CREATE DATABASE intruder", f"GRANT ALL ON {canary}.* TO CURRENT_USER",
                  f"SELECT 1 INTO OUTFILE '{tmp_path / 'out.txt'}'"],
        "postgresql": [f"SELECT * FROM {canary}.secret", f"DROP SCHEMA {canary} CASCADE",
                       "SELECT pg_read_file('/etc/passwd')", "SET ROLE postgres",
                       "COPY (SELECT 1) TO '/tmp/out.txt'", "CREATE SCHEMA intruder"],
    }[backend]
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        for attempt in attempts:
            assert sandbox._run(attempt).error is not None, attempt
        if backend == "mysql":  # no FILE privilege: the server reads nothing
            assert sandbox._run("SELECT LOAD_FILE('/etc/passwd')").rows == ((None,),)
    finally:
        sandbox.close()
    assert canary_rows(backend, sandbox_url, canary, tmp_path) == [("intact",)]
    assert not (tmp_path / "copy.db").exists()


def test_time_limit_rows_cap_and_errors(backend: str, sandbox_url: str) -> None:
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url, statement_timeout_s=0.5,
                                         max_rows_shown=20), TABLE)
    slow = {"sqlite": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
                      "SELECT COUNT(*) FROM c",
            "mysql": "SELECT SLEEP(5)",
            "postgresql": "SELECT pg_sleep(5)"}[backend]
    try:
        started = time.monotonic()
        assert sandbox.observe(slow).startswith("Error: ")
        assert time.monotonic() - started < 3
        listing = sandbox.observe(f"SELECT * FROM {sandbox.quote(TABLE.name)}")
        assert listing.endswith("(20 of 30 rows shown; the rest were cut.)")
        assert listing.count("team ") == 20
        assert sandbox.observe("SELEC 1").startswith("Error: ")
        assert sandbox.observe(f"UPDATE {sandbox.quote(TABLE.name)} SET points = 0 "
                               f"WHERE points < 3") == "Query OK, 3 row(s) affected."
        assert sandbox.observe("SELECT '100%' AS `p`" if backend == "mysql"
                               else "SELECT '100%' AS p") == "[('100%',)]"
    finally:
        sandbox.close()


@pytest.mark.parametrize("backend", ["mysql"])
def test_mysql_sandbox_session_drops_only_strict_mode(sandbox_url: str) -> None:
    """The benchmarks' SQL compares text with numbers, which strict mode refuses in an
    UPDATE; the rest of the server's sql_mode stays, NO_DIR_IN_CREATE is added (a table's
    files stay in the sandbox's folder), and other sessions keep all of theirs."""
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        result = sandbox.execute("SELECT @@SESSION.sql_mode, @@GLOBAL.sql_mode")
    finally:
        sandbox.close()
    assert result.rows is not None
    session, server = (set(str(modes).split(",")) - {""} for modes in result.rows[0])
    assert session == server - {"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"} | {"NO_DIR_IN_CREATE"}


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_gives_text_columns_of_plain_numbers_a_numeric_type(sandbox_url: str) -> None:
    """Bare numbers compare with them as on MySQL (PostgreSQL has no text = integer);
    decimals keep their digits; a column with any other text, or only NULLs, stays text."""
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), NUMBERS_AS_TEXT)
    try:
        types = sandbox.execute('SELECT pg_typeof("Game")::text, pg_typeof("Score")::text, '
                                'pg_typeof("Code")::text, pg_typeof("Season")::text, '
                                'pg_typeof("Note")::text FROM "Results" LIMIT 1')
        assert types.rows == (("bigint", "numeric", "text", "text", "text"),)
        assert sandbox.observe('SELECT "Code" FROM "Results" WHERE "Game" = 39') == "[('12',)]"
        assert sandbox.observe('SELECT "Game" FROM "Results" WHERE "Score" > 9.6 '
                               'ORDER BY "Score"') == "[(38,), (40,), (None,)]"
        assert sandbox.observe('SELECT "Score"::text FROM "Results" WHERE "Game" = 38 '
                               'AND "Code" = \'007\' AND "Season" = \'2010\'') == "[('9.640',)]"
        assert sandbox.table_rows() == [(38, 9.64, "007", "2010", None),
                                        (39, -0.5, "12", "2010–11", None),
                                        (40, 10.25, "3", "2012", None),
                                        (None, 11, "4", "2013", None)]
    finally:
        sandbox.close()


def test_server_sandboxes_leave_nothing_behind(backend: str, sandbox_url: str) -> None:
    if backend == "sqlite":
        pytest.skip("an in-memory SQLite sandbox has nothing to drop")
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    name = sandbox._backend.name  # type: ignore[attr-defined]
    sandbox.close()
    sandbox.close()
    engine = create_engine(sandbox_url)
    with engine.connect() as connection:
        if backend == "mysql":
            left = connection.exec_driver_sql(
                f"SELECT (SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = "
                f"'{name}') + (SELECT COUNT(*) FROM mysql.user WHERE user = '{name}')").scalar()
        else:
            left = connection.exec_driver_sql(
                f"SELECT COUNT(*) FROM pg_roles WHERE rolname = '{name}'").scalar()
    engine.dispose()
    assert left == 0
    if backend == "postgresql":  # its database, kept for the next sandbox, holds nothing
        database = sandbox._backend.database  # type: ignore[attr-defined]
        engine = create_engine(make_url(sandbox_url).set(database=database))
        with engine.connect() as connection:
            assert connection.exec_driver_sql(
                "SELECT COUNT(*) FROM pg_class WHERE oid >= 16384").scalar() == 0
        engine.dispose()
        drop_kept_databases()
        engine = create_engine(sandbox_url)
        with engine.connect() as connection:
            assert connection.exec_driver_sql(
                f"SELECT COUNT(*) FROM pg_database WHERE datname = '{database}'").scalar() == 0
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_database_of_a_closed_sandbox_serves_the_next_without_its_objects(
        sandbox_url: str) -> None:
    """A database is kept for the next sandbox only once nothing made in it is left: here
    a table, a view, an index, a temporary table and a large object."""
    first = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    database = first._backend.database  # type: ignore[attr-defined]
    try:
        for sql in (f"CREATE TABLE {SECRET_TABLE} ({SECRET_COLUMN} INT)",
                    f"CREATE INDEX {SECRET_TABLE}_index ON {SECRET_TABLE} ({SECRET_COLUMN})",
                    f"CREATE VIEW {SECRET_TABLE}_view AS SELECT 1 AS v",
                    f"CREATE TEMPORARY TABLE {SECRET_TABLE}_temp (v INT)",
                    "SELECT lo_create(0)"):
            assert first._run(sql).error is None, sql  # unguarded: the server's say
    finally:
        first.close()
    second = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        assert second._backend.database == database  # type: ignore[attr-defined]
        found = {name: second._run(sql) for name, sql in
                 catalog_searches("postgresql", second).items()}
        assert {name: result.rows for name, result in found.items()
                if result.rows not in (None, ((0,),))} == {}
        assert second._run("SELECT count(*) FROM pg_largeobject_metadata").rows == ((0,),)
        assert second.table_rows() == list(TABLE.rows)
    finally:
        second.close()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_database_with_objects_left_is_dropped(sandbox_url: str) -> None:
    """Something in a closed sandbox's database that dropping its role missed (here: a
    table of the admin's) and the database goes, not to the next sandbox."""
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    database = sandbox._backend.database  # type: ignore[attr-defined]
    engine = create_engine(make_url(sandbox_url).set(database=database),
                           isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(f"CREATE TABLE public.{SECRET_TABLE} (v INT)")
    engine.dispose()
    sandbox.close()
    engine = create_engine(sandbox_url)
    with engine.connect() as connection:
        assert connection.exec_driver_sql(
            f"SELECT COUNT(*) FROM pg_database WHERE datname = '{database}'").scalar() == 0
    engine.dispose()


def test_unsupported_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="in memory"):
        SqlSandbox(SandboxSettings(url="sqlite:////tmp/shared.db"), TABLE)
    with pytest.raises(ValueError, match="unsupported backend"):
        SqlSandbox(SandboxSettings(url="oracle://scott@localhost/xe"), TABLE)
    assert make_url(SandboxSettings().url).get_backend_name() == "sqlite"


# ---- bounds that hold against hostile statements -------------------------------------
TIMEOUT_S = 0.5
BOUNDED_S = TIMEOUT_S + CANCEL_GRACE_S + 1.0  # the limit, the client's grace and slack
# A view whose one row never comes (MariaDB stops recursion after
# max_recursive_iterations: a sleep).
ENDLESS_VIEW = {
    "sqlite": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
              "SELECT 'x' AS \"Team Name\", count(*) AS points FROM c",
    "postgresql": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
                  "SELECT 'x' AS \"Team Name\", count(*) AS points FROM c",
    "mysql": "SELECT 'x' AS `Team Name`, SLEEP(100) AS points",
}
HUGE_VALUES = {
    "sqlite": ["SELECT randomblob(300000000)", "SELECT zeroblob(300000000)"],
    "postgresql": ["SELECT repeat('a', 300000000)", "SELECT lpad('a', 300000000, 'b')",
                   "SELECT repeat('a', 60000), repeat('b', 60000)"],
    # MySQL's own bound on a value is the server's max_allowed_packet (16 MB here)
    "mysql": ["SELECT repeat('a', 16000000)", "SELECT lpad('a', 3000000, 'b')"],
}
MANY_ROWS = {
    "sqlite": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c "
              "WHERE n < 5000000) SELECT n FROM c",
    "postgresql": "SELECT a.n FROM generate_series(1, 5000) AS a(n), "
                  "generate_series(1, 5000) AS b(n)",
    "mysql": "SELECT a.seq FROM seq_1_to_5000 AS a, seq_1_to_5000 AS b",
}
# 27 MB of incompressible or uncompressed rows, past the default 16 MB
GROWTH = {
    "sqlite": ["CREATE TABLE big{0} AS WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL "
               "SELECT n + 1 FROM c WHERE n < 300) SELECT randomblob(90000) AS b FROM c"],
    "postgresql": ["CREATE TABLE big{0} (b text)",
                   "ALTER TABLE big{0} ALTER COLUMN b SET STORAGE EXTERNAL",
                   "INSERT INTO big{0} SELECT repeat('a', 90000) FROM generate_series(1, 300)"],
    "mysql": ["CREATE TABLE big{0} (b MEDIUMTEXT)",
              "INSERT INTO big{0} SELECT repeat('a', 90000) FROM seq_1_to_300"],
}
_CHILD = """
import json, resource, sys, time
from src.tasks.instance.db_bench.problem import TableSpec
from src.tasks.instance.db_bench.sandbox import SandboxSettings, SqlSandbox

def written():  # bytes this process has written, files and sockets alike
    with open("/proc/self/io") as io:
        return int(next(line for line in io if line.startswith("wchar:")).split()[1])

settings, table, statements = json.loads(sys.argv[1])
sandbox = SqlSandbox(SandboxSettings(**settings), TableSpec(**table))
try:
    before, written_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, written()
    observations, seconds = [], []
    for sql in statements:
        started = time.monotonic()
        observations.append(sandbox.observe(sql))
        seconds.append(time.monotonic() - started)
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps({"growth_mb": growth_mb, "written_mb": (written() - written_before) / 2**20,
                      "storage_exceeded": sandbox.storage_exceeded, "seconds": seconds,
                      "observations": [[len(text), text[:200], text[-200:]]
                                       for text in observations]}))
finally:
    sandbox.close()
"""


def in_fresh_process(settings: dict[str, Any], statements: list[str]) -> dict[str, Any]:
    """The statements observed in a fresh interpreter, whose peak memory (RUSAGE's
    maxrss) starts low: its growth and the bytes it wrote while they ran, and each
    observation's seconds, length, head and tail."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD,
         json.dumps([settings, TABLE.model_dump(mode="json"), statements])],
        capture_output=True, text=True, timeout=300, cwd=REPOSITORY)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def within(seconds: float, work: Callable[[], T]) -> T:
    """`work`'s result, run on a thread of its own (SQLite's connection stays on it), or
    a failure when it has not ended after `seconds`."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as error:  # handed to the test's thread
            outcome.append((False, error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still running after {seconds} s"
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value


def test_grader_reads_a_view_in_the_tables_place_as_gone_within_the_limit(
        backend: str, sandbox_url: str) -> None:
    """The table renamed away and a view in its place: the original rows through a view
    do not count, and a view that never ends is read within the time limit."""
    def scenario() -> tuple[Any, Any, Any, float]:
        sandbox = SqlSandbox(SandboxSettings(url=sandbox_url, statement_timeout_s=TIMEOUT_S),
                             TABLE)
        name = sandbox.quote(TABLE.name)
        try:
            for sql in (f"ALTER TABLE {name} RENAME TO old_scores",
                        f"CREATE VIEW {name} AS SELECT * FROM old_scores"):
                assert not sandbox.observe(sql).startswith("Error"), sql
            same_rows_through_a_view = sandbox.table_rows()
            for sql in (f"DROP VIEW {name}", f"CREATE VIEW {name} AS {ENDLESS_VIEW[backend]}"):
                assert not sandbox.observe(sql).startswith("Error"), sql
            started = time.monotonic()
            endless = sandbox.table_rows(), sandbox.table_md5()
            return same_rows_through_a_view, *endless, time.monotonic() - started
        finally:
            sandbox.close()

    through_a_view, rows, md5, seconds = within(30, scenario)
    assert through_a_view is None
    assert rows is None and md5 is None
    assert seconds < 2 * BOUNDED_S


def test_grader_reads_a_table_with_other_columns_as_gone(backend: str, sandbox_url: str) -> None:
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    name = sandbox.quote(TABLE.name)
    try:
        assert sandbox.observe(f"ALTER TABLE {name} RENAME COLUMN points TO score") == \
            "Query OK, 0 row(s) affected."
        assert sandbox.table_rows() is None  # the same rows, under another column
        sandbox.observe(f"ALTER TABLE {name} RENAME COLUMN score TO points")
        assert sandbox.table_rows() == list(TABLE.rows)
    finally:
        sandbox.close()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_time_limit_cannot_be_switched_off(sandbox_url: str) -> None:
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url, statement_timeout_s=TIMEOUT_S), TABLE)
    try:
        for attempt in ("SELECT \"set_config\"('statement_timeout', '0', false)",
                        "SELECT U&\"\\0073et_config\"('statement_timeout', '0', false)",
                        "SELECT U&\"!0073et_config\" UESCAPE '!'('statement_timeout', '0', false)",
                        "UPDATE pg_settings SET setting = '0' WHERE name = 'statement_timeout'",
                        "SELECT query_to_xml('SELECT set_config(''statement_timeout'', ''0'', "
                        "false)', true, true, '')",
                        "SET statement_timeout = 0", "RESET statement_timeout"):
            assert sandbox.observe(attempt).startswith("Error: "), attempt
        assert sandbox.observe("SELECT current_setting('statement_timeout')") == "[('500ms',)]"
        # had a way through been found (here: unguarded), the client still ends the statement
        assert sandbox._run("SET statement_timeout = 0").error is None
        started = time.monotonic()
        assert sandbox.observe("SELECT pg_sleep(4)").startswith("Error: ")
        assert time.monotonic() - started < BOUNDED_S
        # a new session, with the role's limit
        assert sandbox.observe("SELECT current_setting('statement_timeout')") == "[('500ms',)]"
    finally:
        sandbox.close()


@pytest.mark.parametrize("backend", ["mysql"])
def test_mariadb_time_limit_cannot_be_switched_off(sandbox_url: str) -> None:
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url, statement_timeout_s=TIMEOUT_S), TABLE)
    try:
        for attempt in ("SET SESSION max_statement_time = 0", "set @@max_statement_time = 0",
                        "SET STATEMENT max_statement_time = 0 FOR SELECT SLEEP(3)",
                        "/*!SET max_statement_time = 0 */ SELECT SLEEP(3)",
                        "/*M!100100 SET STATEMENT max_statement_time = 0 FOR */ SELECT SLEEP(3)"):
            started = time.monotonic()
            sandbox.observe(attempt)
            assert time.monotonic() - started < BOUNDED_S, attempt
        assert sandbox.observe("SELECT @@max_statement_time") == "[(0.5,)]"
        assert sandbox._run("SET SESSION max_statement_time = 0").error is None  # unguarded
        started = time.monotonic()
        assert sandbox.observe("SELECT SLEEP(4)").startswith(("Error: ", "[(1,)]"))
        assert time.monotonic() - started < BOUNDED_S
        # a new session, with the user's limit
        assert sandbox.observe("SELECT @@max_statement_time") == "[(0.5,)]"
    finally:
        sandbox.close()


def test_huge_values_are_errors_without_the_memory(backend: str, sandbox_url: str) -> None:
    statements = HUGE_VALUES[backend]
    started = time.monotonic()
    child = in_fresh_process({"url": sandbox_url}, statements)
    for (length, head, _), statement in zip(child["observations"], statements, strict=True):
        assert head.startswith("Error: ") and length < 1000, (statement, head)
    assert child["growth_mb"] < 100
    assert time.monotonic() - started < 30


def test_rows_read_are_bounded(backend: str, sandbox_url: str) -> None:
    child = in_fresh_process({"url": sandbox_url}, [MANY_ROWS[backend]])
    [(_, _, tail)] = child["observations"]
    assert tail.endswith("(20 of more than 10000 rows shown; the rest were cut.)")
    assert child["growth_mb"] < 100


def test_grader_reads_a_table_past_the_rows_bound_as_gone(backend: str,
                                                          sandbox_url: str) -> None:
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    name = sandbox.quote(TABLE.name)
    try:
        for _ in range(9):  # 30 rows doubled: 15360
            assert not sandbox.observe(f"INSERT INTO {name} SELECT * FROM "
                                       f"(SELECT * FROM {name}) AS copy").startswith("Error")
        assert sandbox.table_rows() is None
    finally:
        sandbox.close()


def test_observations_are_cut_at_their_bound(backend: str, sandbox_url: str) -> None:
    long_value = {"sqlite": "SELECT replace(hex(zeroblob(20000)), '00', 'ab')",
                  "postgresql": "SELECT repeat('ab', 20000)",
                  "mysql": "SELECT repeat('ab', 20000)"}[backend]
    # MySQL's messages are short (MYSQL_ERRMSG_SIZE); the others may quote any text
    long_error = {"sqlite": ["SELECT * FROM " + "x" * 30000],
                  "postgresql": ["SELECT CAST(repeat('x', 30000) AS int)"],
                  "mysql": []}[backend]
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        for sql in [long_value, *long_error]:
            observation = sandbox.observe(sql)
            assert observation.endswith("\n(the output was cut at 20000 characters.)"), sql[:80]
            assert len(observation) < 20100
        assert sandbox.observe("SELECT 'ab'") == "[('ab',)]"
    finally:
        sandbox.close()


def test_stored_size_is_bounded(backend: str, sandbox_url: str) -> None:
    """Each round tries to store 27 MB more: SQLite refuses the write (its memory stays
    put), a server's sandbox reports that it is over its bound."""
    statements = [sql.format(round_) for round_ in range(4) for sql in GROWTH[backend]]
    child = in_fresh_process({"url": sandbox_url}, statements)
    observations = [head for _, head, _ in child["observations"]]
    if backend == "sqlite":
        assert all(head.startswith("Error: database or disk is full") for head in observations)
        assert child["growth_mb"] < 60
        assert not child["storage_exceeded"]
    else:
        assert observations[len(GROWTH[backend]) - 1] == \
            "Error: the sandbox's tables hold more than 16 MB, its limit"
        assert child["storage_exceeded"]


def test_sqlite_statement_is_ended_when_its_own_bound_fails() -> None:
    """The client's timer is the last bound: here SQLite's progress handler is gone."""
    sandbox = SqlSandbox(SandboxSettings(statement_timeout_s=TIMEOUT_S), TABLE)
    try:
        sandbox._backend.raw.set_progress_handler(None, 0)
        started = time.monotonic()
        observation = sandbox.observe(ENDLESS_VIEW["sqlite"])
        assert time.monotonic() - started < BOUNDED_S
        assert observation == (f"Error: the statement ran past the sandbox's time limit "
                               f"({TIMEOUT_S:g} s) and was ended")
        assert sandbox.observe("SELECT 1") == "[(1,)]"
    finally:
        sandbox.close()


# One call that builds a huge value: SQLite's printf repeats a character in a loop that
# neither its progress handler nor an interrupt reaches; PostgreSQL pads, repeats, fills
# and joins without looking for a cancel request; MariaDB stops at max_allowed_packet.
VALUE_BUILDERS = {
    "sqlite": ["SELECT printf('%.*c', 2147483647, 'x'), printf('%.*c', 2147483647, 'x'), "
               "printf('%.*c', 2147483647, 'x')",
               "SELECT format('%.2147483647c', 'x')",
               "SELECT printf('%!.*c', -2147483647, 'x')",
               "SELECT printf('%.99999c%.99999c', 'x', 'y')"],
    "postgresql": ["SELECT format('%300000000s', 'x'), format('%300000000s', 'x'), "
                   "format('%300000000s', 'x')",
                   "SELECT format('%*s', 300000000, 'x')",
                   "SELECT format(E'%30000000s\\n' 's', 'x')",
                   "SELECT lpad('a', 300000000), rpad('a', 300000000, 'b')",
                   "SELECT repeat('ab', 300000000)",
                   "SELECT array_fill(1, ARRAY[100000000])",
                   "SELECT array_to_string(array_fill(''::text, ARRAY[10000]), repeat('a', 100000))",
                   "SELECT concat_ws(repeat('a', 100000), VARIADIC array_fill(''::text, "
                   "ARRAY[10000]))",
                   "SELECT regexp_replace(repeat('a', 100000), 'a', repeat('b', 1000), 'g')",
                   "SELECT replace(repeat('a', 100000), 'a', repeat('b', 100000))",
                   "SELECT " + ", ".join(["'a'::char(10000000)"] * 30),
                   "SELECT bpchar('a', 10000004, true), \"bit\"(1, 80000000)"],
    "mysql": ["SELECT repeat('a', 1000000000)", "SELECT lpad('a', 1000000000, 'b')",
              "SELECT space(1000000000), rpad('a', 1000000000, 'b')"],
}


def test_value_building_calls_are_bounded_before_they_run(backend: str,
                                                          sandbox_url: str) -> None:
    statements = VALUE_BUILDERS[backend]
    child = in_fresh_process({"url": sandbox_url, "statement_timeout_s": TIMEOUT_S}, statements)
    # an error, or (MariaDB) NULL for a value longer than max_allowed_packet
    for (length, head, _), seconds, statement in zip(child["observations"], child["seconds"],
                                                     statements, strict=True):
        assert length < 1000 and seconds < BOUNDED_S, (statement, head, seconds)


def test_value_builders_within_the_bound_still_work(backend: str, sandbox_url: str) -> None:
    expected = {
        "sqlite": {"SELECT printf('%5.2f|%-4s|%.3c|%*d', 3.14159, 'ab', 'x', -3, 7)":
                   "[(' 3.14|ab  |xxx|7  ',)]",
                   "SELECT format('%s-%d', 'a', 2), printf(NULL), printf('%')":
                   "[('a-2', None, '%')]"},
        "postgresql": {"SELECT format('%5s|%-3s|%1$s', 'ab', 'c'), lpad('7', 3, '0'), "
                       "rpad('x', 2), repeat('ab', 2)":
                       "[('   ab|c  |ab', '007', 'x ', 'abab')]",
                       "SELECT replace('banana', 'a', 'oo'), regexp_replace('a1b2', '\\d', "
                       "'#', 'g'), array_to_string(ARRAY[1, NULL, 3], '-', '?'), "
                       "array_fill(0, ARRAY[2])::text, 'ab'::char(4) || '|'":
                       "[('boonoonoo', 'a#b#', '1-?-3', '{0,0}', 'ab|')]"},
        "mysql": {"SELECT lpad('7', 3, '0'), repeat('ab', 2)": "[('007', 'abab')]"},
    }[backend]
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        for sql, observation in expected.items():
            assert sandbox.observe(sql) == observation, sql
    finally:
        sandbox.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_sorts_and_deduplication_stay_within_the_storage_bound(sandbox_url: str) -> None:
    """A sort over endless rows would spill to a temporary file, outside every bound."""
    rows = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
            "SELECT randomblob(60000) AS b FROM c")
    statements = [f"SELECT b FROM ({rows}) ORDER BY b",
                  f"{rows} UNION {rows}",
                  f"SELECT DISTINCT b FROM ({rows})",
                  f"SELECT count(DISTINCT b) FROM ({rows})"]
    child = in_fresh_process({"url": sandbox_url, "statement_timeout_s": 3.0}, statements)
    # DISTINCT may stream its first rows (a bounded read); the sorts fail
    for (length, head, _), statement in zip(child["observations"], statements, strict=True):
        assert length < 20100 and (head.startswith("Error: ") or "DISTINCT b FROM" in statement), \
            (statement, head[:100])
    assert child["written_mb"] < 16
    assert child["growth_mb"] < 100


@pytest.mark.parametrize("backend", ["mysql"])
def test_mariadb_tables_stay_in_the_sandboxs_database(sandbox_url: str, tmp_path: Path) -> None:
    """Table options that name a place on disk are refused, by the guard and by the
    server; so are engines whose tables the sandbox does not measure."""
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # the server may write here: nothing of the sandbox's must
    place = f"'{outside}'"
    attempts = [
        f"CREATE TABLE d1 (v TEXT) ENGINE=MyISAM DATA DIRECTORY={place} INDEX DIRECTORY={place}",
        f"CREATE TABLE d2 (v TEXT) ENGINE=Aria DATA DIRECTORY = {place}",
        f"CREATE TABLE d3 (v TEXT) DATA /* here */ DIRECTORY \"{outside}\"",
        f"CREATE TABLE d4 (v INT) ENGINE=MyISAM PARTITION BY HASH(v) "
        f"(PARTITION p0 DATA DIRECTORY={place} INDEX DIRECTORY={place})",
        "CREATE TABLE d5 (v TEXT) ENGINE=MyISAM",
        f"ALTER TABLE d5 ENGINE=Aria DATA DIRECTORY={place}",
        "CREATE TABLE d6 (v INT) ENGINE=MyISAM PARTITION BY HASH(v) (PARTITION p0)",
        f"ALTER TABLE d6 ADD PARTITION (PARTITION p1 DATA DIRECTORY={place})",
    ]
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        for attempt in attempts:
            if "DIRECTORY" in attempt:
                assert sandbox.observe(attempt).startswith("Error: "), attempt
            sandbox._run(attempt)  # unguarded: the server must not follow it either
        for engine in ("CSV", "MRG_MyISAM", "`CSV`", "'CSV'"):
            assert sandbox.observe(f"CREATE TABLE e (v INT NOT NULL) ENGINE = {engine}") \
                .startswith("Error: "), engine
        assert sandbox.observe("CREATE TABLE cars (Engine TEXT, v INT) ENGINE InnoDB") == \
            "Query OK, 0 row(s) affected."
        assert sandbox.observe("UPDATE cars SET Engine = 'CSV' WHERE v = 1") == \
            "Query OK, 0 row(s) affected."
    finally:
        sandbox.close()
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("backend", ["mysql"])
def test_mariadb_temporary_tables_are_refused(sandbox_url: str) -> None:
    """The server does not say how big a temporary table is, and one of the table's name
    would hide the table from the grader."""
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    name = sandbox.quote(TABLE.name)
    try:
        for attempt in (f"CREATE TEMPORARY TABLE {name} AS SELECT * FROM {name} WHERE 0",
                        "CREATE TEMPORARY TABLE big (b MEDIUMTEXT)"):
            assert sandbox.observe(attempt).startswith("Error: "), attempt
            assert sandbox._run(attempt).error is not None, attempt  # unguarded
        assert sandbox.table_rows() == list(TABLE.rows)
    finally:
        sandbox.close()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_row_security_cannot_hide_rows_from_the_grader(sandbox_url: str) -> None:
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    name = sandbox.quote(TABLE.name)
    try:
        for sql in (f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY",
                    f"ALTER TABLE {name} FORCE ROW LEVEL SECURITY"):
            sandbox._run(sql)  # unguarded: what the server does with it
        assert sandbox.table_rows() in (None, list(TABLE.rows))
    finally:
        sandbox.close()


# ---- what one episode can see of another ------------------------------------------
SECRET_TABLE, SECRET_COLUMN = "zq_private_ledger", "zq_private_amount"
_SECRET = "zq_private"


def catalog_searches(backend: str, sandbox: SqlSandbox) -> dict[str, str]:
    """A count of the rows that name `_SECRET`, per catalog the sandbox's own connection
    may read: every table and view of pg_catalog and information_schema (PostgreSQL,
    each row as text), of information_schema (MariaDB, its columns joined), the SQLite
    schema tables; and the catalogs' lock and session listings joined to names."""
    # built by the server: the search's own text, in a session listing, does not hold it
    head, tail = f"'%{_SECRET[:2]}'", f"'{_SECRET[2:]}%'"
    like = f"CONCAT({head}, {tail})" if backend == "mysql" else f"({head} || {tail})"
    if backend == "sqlite":
        return {name: f"SELECT count(*) FROM {name} AS t WHERE t.name LIKE {like} "
                      f"OR t.sql LIKE {like}" for name in ("main.sqlite_master",
                                                          "temp.sqlite_master")}
    if backend == "postgresql":
        relations = sandbox._run(
            "SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname) "
            "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname IN ('pg_catalog', 'information_schema') "
            "AND c.relkind IN ('r', 'v', 'm')")
        assert relations.rows and len(relations.rows) > 150, relations
        searches = {str(name): f"SELECT count(*) FROM {name} AS t WHERE t::text LIKE {like}"
                    for (name,) in relations.rows}
        searches["pg_locks joined"] = (
            f"SELECT count(*) FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_class c "
            f"ON c.oid = l.relation WHERE c.relname LIKE {like} "
            f"OR l.relation::regclass::text LIKE {like}")
        return searches
    columns = sandbox._run("SELECT TABLE_NAME, GROUP_CONCAT(CONCAT('`', COLUMN_NAME, '`')) "
                           "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                           "'information_schema' GROUP BY TABLE_NAME")
    assert columns.rows and len(columns.rows) > 50, columns
    return {str(name): f"SELECT count(*) FROM information_schema.`{name}` WHERE "
                       f"CONCAT_WS(',', {listed}) LIKE {like}"
            for name, listed in columns.rows}


def test_an_episode_cannot_list_another_episodes_tables(backend: str, sandbox_url: str) -> None:
    """Two sandboxes open at once: every catalog one can read names none of the other's
    tables or columns, even while the other holds a lock on its table."""
    seeing, hiding = (SqlSandbox(SandboxSettings(url=sandbox_url), TABLE) for _ in range(2))
    held = hiding._backend.raw.cursor()
    try:
        for sql in (f"CREATE TABLE {SECRET_TABLE} ({SECRET_COLUMN} INT)",
                    f"CREATE INDEX {SECRET_TABLE}_index ON {SECRET_TABLE} ({SECRET_COLUMN})",
                    f"CREATE VIEW {SECRET_TABLE}_view AS SELECT * FROM {SECRET_TABLE}",
                    f"INSERT INTO {SECRET_TABLE} VALUES (1)",
                    f"SELECT * FROM {SECRET_TABLE}"):
            assert not hiding.observe(sql).startswith("Error"), sql
        if backend != "sqlite":
            held.execute("BEGIN")
            held.execute(f"SELECT * FROM {SECRET_TABLE} FOR UPDATE")
            held.fetchall()
        searches = catalog_searches(backend, seeing)
        found = {name: seeing._run(sql) for name, sql in searches.items()}
        leaks = {name: result.rows for name, result in found.items()
                 if result.rows not in (None, ((0,),))}
        assert leaks == {}
        readable = {"sqlite": ["main.sqlite_master"],
                    "postgresql": ["pg_catalog.pg_class", "pg_catalog.pg_tables",
                                   "pg_catalog.pg_namespace", "pg_catalog.pg_attribute",
                                   "pg_catalog.pg_type", "pg_catalog.pg_stat_user_tables",
                                   "pg_catalog.pg_statio_all_tables", "pg_locks joined",
                                   "information_schema.tables", "information_schema.columns"],
                    "mysql": ["TABLES", "COLUMNS", "STATISTICS", "VIEWS", "SCHEMATA"]}[backend]
        assert {name: found[name].error for name in readable} == dict.fromkeys(readable)
        # the searches find a name that is there: the hiding sandbox's in its own catalogs
        assert hiding._run(catalog_searches(backend, hiding)[readable[0]]).rows != ((0,),)
        if backend == "mysql":
            for sql in ("SHOW DATABASES", "SHOW OPEN TABLES", "SHOW PROCESSLIST"):
                assert _SECRET not in seeing.observe(sql), sql
    finally:
        held.close()
        seeing.close()
        hiding.close()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_statement_past_the_storage_bound_is_rolled_back(sandbox_url: str) -> None:
    """The sizes are checked before the statement commits: an INSERT that would write ten
    times the bound is undone, ends the sandbox's storage, and leaves the table as it was
    (its space given back)."""
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url, max_storage_mb=1), TABLE)
    name = sandbox.quote(TABLE.name)
    try:
        size = f"SELECT pg_total_relation_size('{name}')"
        # the series in the select list streams (in FROM it would spill to a temporary
        # file, which temp_file_limit bounds): 80000 rows of 100+ bytes, 10 MB and more
        observation = sandbox.observe(f"INSERT INTO {name} SELECT repeat('x', 100) || n, n "
                                      f"FROM (SELECT generate_series(1, 80000) AS n) AS s")
        assert observation == "Error: the sandbox's tables hold more than 1 MB, its limit"
        assert sandbox.storage_exceeded
        assert sandbox.table_rows() == list(TABLE.rows)
        [(stored,)] = sandbox.execute(size).rows or [(None,)]
        assert isinstance(stored, int) and stored < 1024 * 1024
    finally:
        sandbox.close()
