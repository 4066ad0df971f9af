"""SQL text: the lexer's per-dialect reading, the statement guard, reference translation."""

from __future__ import annotations

import pytest

from src.tasks.instance.db_bench.problem import ColumnSpec, TableSpec
from src.tasks.instance.db_bench.reference_sql import translate_reference_sql
from src.tasks.instance.db_bench.sql_lexer import SqlLexError, TokenKind, scan
from src.tasks.instance.db_bench.statement_guard import StatementGuard, StatementRejected


def test_semicolons_inside_strings_names_and_comments_do_not_split() -> None:
    sql = "SELECT 'a;b', `c;d` FROM t -- x; y\n/* ; */ WHERE e = \"f;g\";"
    scanned = scan(sql, "mysql")
    assert len(scanned.statements()) == 1
    assert [t.value for t in scanned.tokens if t.kind is TokenKind.STRING] == ["a;b", "f;g"]
    assert "--" not in scanned.code and "/*" not in scanned.code


def test_dialect_differences() -> None:
    # MySQL: backslash escapes, '#' comments, "--" needs a space to start a comment
    assert scan(r"SELECT 'it\'s'", "mysql").tokens[1].value == "it's"
    assert len(scan("SELECT 1 # ; hidden", "mysql").statements()) == 1
    assert [t.value for t in scan("SELECT 5--1", "mysql").tokens] == ["SELECT", "5", "-", "-", "1"]
    # PostgreSQL: dollar quotes and nested comments; "..." is a name
    assert scan("SELECT $x$a;b$x$", "postgresql").tokens[1].value == "a;b"
    assert len(scan("SELECT /* a /* b */ ; */ 1", "postgresql").statements()) == 1
    assert scan('SELECT "a b"', "postgresql").tokens[1].kind is TokenKind.IDENTIFIER
    assert scan('SELECT "a b"', "mysql").tokens[1].kind is TokenKind.STRING
    with pytest.raises(SqlLexError, match="unterminated string"):
        scan("SELECT 'open", "sqlite")


def test_guard_passes_ordinary_statements() -> None:
    guard = StatementGuard("mysql", frozenset({"test", "mysql"}), frozenset({"scores"}))
    for sql in ("SELECT a FROM t WHERE b >= 2;", "WITH x AS (SELECT 1) SELECT * FROM x",
                "CREATE TABLE tmp (a INT) ENGINE = Aria", "CREATE OR REPLACE VIEW v AS SELECT 1",
                "DROP TABLE IF EXISTS tmp", "SELECT scores.a FROM scores",
                "SELECT t.a FROM t", "SHOW TABLES", "(SELECT 1)"):
        assert guard.check(sql).rstrip(";") == sql.rstrip(";")
    assert guard.check("SELECT 1 /* note */ -- end") == "SELECT 1"


@pytest.mark.parametrize(("dialect", "sql"), [
    ("mysql", "CREATE TEMPORARY TABLE tmp (a INT)"),
    ("mysql", "CREATE TABLE d (v TEXT) DATA /* c */ DIRECTORY = '/tmp'"),
    ("mysql", "ALTER TABLE d ENGINE=MyISAM INDEX DIRECTORY '/tmp'"),
    ("mysql", "CREATE TABLE e (v INT) ENGINE = `CSV`"),
    ("mysql", "CREATE TABLE e (v INT) ENGINE MRG_MyISAM"),
    ("postgresql", "SELECT format('%1$-60000s%1$-60000s', 'x')"),
    ("postgresql", "SELECT format('%*s', 9, 'x')"),
    ("postgresql", "SELECT format(f, 'x') FROM t"),
    ("postgresql", "SELECT format(E'%9s\n' '9999999s', 'x')"),
    ("postgresql", "SELECT concat_ws(',', VARIADIC a) FROM t"),
    ("postgresql", "SELECT 'a'::char(200000), CAST(1 AS bit(900000))"),
])
def test_guard_refuses_what_outgrows_the_sandboxs_bounds(dialect: str, sql: str) -> None:
    guard = StatementGuard(dialect, frozenset(), max_value_bytes=100_000)  # type: ignore[arg-type]
    with pytest.raises(StatementRejected, match="not allowed|value limit|string literal"):
        guard.check(sql)
    assert guard.check({"mysql": "CREATE TABLE cars (Engine TEXT) ENGINE InnoDB",
                        "postgresql": "SELECT format('%5s|%%|%1$-3s', 'a'), 'a'::char(9)"}[dialect])


def test_guard_refuses_leaving_the_sandbox() -> None:
    guard = StatementGuard("postgresql", frozenset({"public", "pg_catalog"}))
    for sql in ("SELECT * FROM public.t", 'SELECT * FROM "public".t', "SET ROLE postgres",
                "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1 $$ LANGUAGE sql",
                "SELECT pg_catalog.pg_read_file('x')", "", ";", "SELECT 1; SELECT 2"):
        with pytest.raises(StatementRejected):
            guard.check(sql)


def test_reference_sql_is_translated_per_dialect() -> None:
    table = TableSpec(name="game_results", columns=(ColumnSpec(name="Opponent"),
                                                    ColumnSpec(name="Year"),
                                                    ColumnSpec(name="Date moved")))
    sql = ("UPDATE game_results SET Opponent = \"vs. O'Hara\", `date moved` = 'a\\'b' "
           "WHERE Year = '2015' AND YEAR(NOW()) > 0")
    assert translate_reference_sql(sql, "mysql", _double_quote, table) == sql
    assert translate_reference_sql(sql, "postgresql", _double_quote, table) == (
        "UPDATE \"game_results\" SET \"Opponent\" = 'vs. O''Hara', \"Date moved\" = 'a''b' "
        "WHERE \"Year\" = '2015' AND YEAR(NOW()) > 0")
    assert translate_reference_sql(sql, "sqlite", _double_quote, table) == (
        "UPDATE game_results SET Opponent = 'vs. O''Hara', \"Date moved\" = 'a''b' "
        "WHERE Year = '2015' AND YEAR(NOW()) > 0")


def test_mysql_names_may_start_with_digits() -> None:
    """MySQL reads 1952_British_Grand_Prix_0 as a name; the others need it quoted."""
    tokens = scan("SELECT 1e5, 0x1F, 12.5, 3rd.x FROM 1952_British_Grand_Prix_0", "mysql").tokens
    assert [(t.kind, t.value) for t in tokens if t.value[0].isdigit()] == [
        (TokenKind.NUMBER, "1e5"), (TokenKind.NUMBER, "0x1F"), (TokenKind.NUMBER, "12.5"),
        (TokenKind.WORD, "3rd"), (TokenKind.WORD, "1952_British_Grand_Prix_0")]
    with pytest.raises(StatementRejected, match="another database"):  # a qualifier, too
        StatementGuard("mysql", frozenset({"2024_data"})).check("SELECT * FROM 2024_data.secret")
    table = TableSpec(name="1952_British_Grand_Prix_0", columns=(ColumnSpec(name="Pos"),))
    sql = "INSERT INTO 1952_british_grand_prix_0 (Pos) VALUES ('3')"
    for dialect, pos in (("sqlite", "Pos"), ("postgresql", '"Pos"')):
        assert translate_reference_sql(sql, dialect, _double_quote, table) == (
            f"INSERT INTO \"1952_British_Grand_Prix_0\" ({pos}) VALUES ('3')")


def _double_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def test_postgresql_unicode_escapes_are_decoded() -> None:
    """U&"..." and U&'...' with the default or a UESCAPE character; bad escapes are errors."""
    def values(sql: str) -> list[str]:
        return [token.value for token in scan(sql, "postgresql").tokens]

    assert values('SELECT U&"\\0073et_config"') == ["SELECT", "set_config"]
    assert values("SELECT u&'d\\0061t\\+000061'") == ["SELECT", "data"]
    assert values('SELECT U&"!0073et!!x" /* c */ UESCAPE \'!\'') == [
        "SELECT", "set!x", "UESCAPE", "!"]
    assert values('SELECT U&"\\D83D\\DE00"') == ["SELECT", "\U0001f600"]
    assert scan('SELECT U&"a"', "mysql").tokens[1].value == "U"  # not a MySQL form
    for bad in ('SELECT U&"\\00zz"', 'SELECT U&"\\D83D"', "SELECT U&'x' UESCAPE 'a'"):
        with pytest.raises(SqlLexError):
            scan(bad, "postgresql")


@pytest.mark.parametrize(("dialect", "sql"), [
    ("postgresql", "SELECT \"set_config\"('statement_timeout', '0', false)"),
    ("postgresql", "SELECT U&\"\\0073et_config\"('statement_timeout', '0', false)"),
    ("postgresql", "SELECT U&\"!0073et_config\" UESCAPE '!'('statement_timeout', '0', false)"),
    ("postgresql", "SELECT \"pg_catalog\".\"set_config\"('statement_timeout', '0', false)"),
    ("postgresql", "UPDATE pg_settings SET setting = '0' WHERE name = 'statement_timeout'"),
    ("postgresql", "SELECT query_to_xml('SELECT set_config(''statement_timeout'', ''0'', "
                   "false)', true, true, '')"),
    ("mysql", "SELECT `load_file`('/etc/passwd')"),
    ("sqlite", "SELECT [load_extension]('/tmp/evil')"),
    ("sqlite", "SELECT \"readfile\"('/etc/passwd')"),
])
def test_guard_checks_quoted_names_like_words(dialect: str, sql: str) -> None:
    with pytest.raises(StatementRejected, match="not allowed"):
        StatementGuard(dialect, frozenset()).check(sql)  # type: ignore[arg-type]


@pytest.mark.parametrize("sql", ["SELECT 1\x00", "SELECT '\udc80'"])
def test_guard_refuses_text_no_driver_can_send(sql: str) -> None:
    with pytest.raises(StatementRejected):
        StatementGuard("sqlite", frozenset()).check(sql)
