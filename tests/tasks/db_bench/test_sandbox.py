"""The sandbox: escape attempts come back as errors and leave other databases untouched;
statements are bounded in time and rows; sandboxes leave nothing behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url

from src.tasks.instance.db_bench.problem import ColumnSpec, TableSpec
from src.tasks.instance.db_bench.sandbox import SandboxSettings, SqlSandbox
from tests.tasks.db_bench.conftest import canary_rows

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
    UPDATE; the rest of the server's sql_mode stays, and other sessions keep all of it."""
    sandbox = SqlSandbox(SandboxSettings(url=sandbox_url), TABLE)
    try:
        result = sandbox.execute("SELECT @@SESSION.sql_mode, @@GLOBAL.sql_mode")
    finally:
        sandbox.close()
    assert result.rows is not None
    session, server = (set(str(modes).split(",")) - {""} for modes in result.rows[0])
    assert session == server - {"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"}


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
                f"SELECT (SELECT COUNT(*) FROM pg_namespace WHERE nspname = '{name}') + "
                f"(SELECT COUNT(*) FROM pg_roles WHERE rolname = '{name}')").scalar()
    engine.dispose()
    assert left == 0


def test_unsupported_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="in memory"):
        SqlSandbox(SandboxSettings(url="sqlite:////tmp/shared.db"), TABLE)
    with pytest.raises(ValueError, match="unsupported backend"):
        SqlSandbox(SandboxSettings(url="oracle://scott@localhost/xe"), TABLE)
    assert make_url(SandboxSettings().url).get_backend_name() == "sqlite"
