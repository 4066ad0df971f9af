"""A check of the model's SQL before it runs: one statement, of an allowed kind, in its sandbox.

This is the second line of defence and the source of clear refusals; the first is the
database itself (SQLite's authorizer, a MySQL user with grants on one database only, a
PostgreSQL role that owns one schema). The guard refuses statements that leave the
sandbox or its limits: other databases or schemas named as qualifiers, statements that
change sessions, users or databases (USE, SET, GRANT, CREATE DATABASE, ...), functions
that change settings or run SQL text where the guard cannot read it (set_config,
query_to_xml, ...), and file access (INTO OUTFILE, LOAD_FILE, pg_read_file, COPY,
load_extension, ...). Quoted names (`name`, [name], "name", U&"\\0073et_config") are
checked as the names they decode to, like bare words.
"""

from __future__ import annotations

from dataclasses import dataclass

from src.tasks.instance.db_bench.sql_lexer import (
    Dialect,
    ScannedSql,
    SqlLexError,
    Token,
    TokenKind,
    scan,
)

_HEADS: dict[Dialect, frozenset[str]] = {
    "sqlite": frozenset({"SELECT", "WITH", "VALUES", "INSERT", "REPLACE", "UPDATE", "DELETE",
                         "CREATE", "DROP", "ALTER", "EXPLAIN"}),
    "mysql": frozenset({"SELECT", "WITH", "VALUES", "INSERT", "REPLACE", "UPDATE", "DELETE",
                        "CREATE", "DROP", "ALTER", "TRUNCATE", "EXPLAIN", "SHOW", "DESCRIBE",
                        "DESC", "TABLE"}),
    "postgresql": frozenset({"SELECT", "WITH", "VALUES", "INSERT", "UPDATE", "DELETE", "CREATE",
                             "DROP", "ALTER", "TRUNCATE", "EXPLAIN", "TABLE"}),
}
# What CREATE/DROP/ALTER may act on (after OR REPLACE, TEMP/TEMPORARY, UNIQUE).
_SCHEMA_OBJECTS = frozenset({"TABLE", "VIEW", "INDEX"})
_SCHEMA_MODIFIERS = frozenset({"OR", "REPLACE", "TEMP", "TEMPORARY", "UNIQUE"})
# Words that reach files, other sessions or settings, or run SQL text that the guard never
# sees, wherever they appear (bare or quoted). PostgreSQL lets any session change its own
# statement_timeout, so set_config and the pg_settings view (whose UPDATE calls it) are
# refused here, and the sandbox's time limit also has a client-side bound.
_FORBIDDEN_WORDS: dict[Dialect, frozenset[str]] = {
    "sqlite": frozenset({"LOAD_EXTENSION", "READFILE", "WRITEFILE", "FTS3_TOKENIZER"}),
    "mysql": frozenset({"OUTFILE", "DUMPFILE", "INFILE", "LOAD_FILE", "SYS_EXEC", "SYS_EVAL"}),
    "postgresql": frozenset({"PG_READ_FILE", "PG_READ_BINARY_FILE", "PG_LS_DIR", "PG_STAT_FILE",
                             "LO_IMPORT", "LO_EXPORT", "SET_CONFIG", "PG_SETTINGS", "DBLINK",
                             "DBLINK_EXEC", "PG_TERMINATE_BACKEND", "PG_CANCEL_BACKEND",
                             "PG_RELOAD_CONF", "QUERY_TO_XML", "QUERY_TO_XMLSCHEMA",
                             "QUERY_TO_XML_AND_XMLSCHEMA", "TS_STAT", "TS_REWRITE",
                             # large objects live outside the sandbox's schema and its size
                             "LO_CREAT", "LO_CREATE", "LO_FROM_BYTEA", "LO_PUT", "LO_OPEN",
                             "LOWRITE"}),
}


class StatementRejected(ValueError):
    """The statement may not run in the sandbox; the message says why, for the agent."""


@dataclass(frozen=True)
class StatementGuard:
    dialect: Dialect
    foreign_namespaces: frozenset[str]  # lower-cased names of other databases or schemas
    own_names: frozenset[str] = frozenset()  # lower-cased table names that may shadow them

    def check(self, sql: str) -> str:
        """The statement's text without comments, as it is to be executed."""
        if "\0" in sql:
            raise StatementRejected("the SQL holds a NUL character")
        try:
            sql.encode("utf-8")
        except UnicodeEncodeError as error:
            raise StatementRejected(f"the SQL is not valid text: {error.reason} at character "
                                    f"{error.start}") from error
        try:
            scanned: ScannedSql = scan(sql, self.dialect)
        except SqlLexError as error:
            raise StatementRejected(str(error)) from error
        statements = scanned.statements()
        if not statements:
            raise StatementRejected("the SQL block holds no statement")
        if len(statements) > 1:
            raise StatementRejected(f"only one SQL statement can be executed at a time, "
                                    f"found {len(statements)}")
        statement = statements[0]
        self._check_head(statement)
        self._check_words(statement)
        self._check_qualifiers(statement)
        return scanned.text_of(statement)

    def _check_head(self, statement: tuple[Token, ...]) -> None:
        first = statement[0]
        if first.kind is TokenKind.SYMBOL and first.value == "(":
            return  # a parenthesised query
        head = first.value.upper() if first.kind is TokenKind.WORD else first.value
        if head not in _HEADS[self.dialect]:
            raise StatementRejected(f"{head} statements are not allowed in this sandbox; use "
                                    f"SELECT, INSERT, UPDATE, DELETE or table statements")
        if head in ("CREATE", "DROP", "ALTER"):
            words = [token.value.upper() for token in statement[1:]
                     if token.kind is TokenKind.WORD]
            target = next((word for word in words if word not in _SCHEMA_MODIFIERS), "")
            if target not in _SCHEMA_OBJECTS:
                raise StatementRejected(f"{head} {target or '...'} is not allowed in this "
                                        f"sandbox; only tables, views and indexes can be "
                                        f"created, altered or dropped")

    def _check_words(self, statement: tuple[Token, ...]) -> None:
        forbidden = _FORBIDDEN_WORDS[self.dialect]
        for token in statement:
            if (token.kind in (TokenKind.WORD, TokenKind.IDENTIFIER)
                    and token.value.upper() in forbidden):
                raise StatementRejected(f"{token.value} is not allowed in this sandbox (it "
                                        f"reaches files, settings or other sessions)")

    def _check_qualifiers(self, statement: tuple[Token, ...]) -> None:
        for token, following in zip(statement, statement[1:], strict=False):
            if (token.kind in (TokenKind.WORD, TokenKind.IDENTIFIER)
                    and following.kind is TokenKind.SYMBOL and following.value == "."):
                name = token.value.lower()
                if name in self.foreign_namespaces and name not in self.own_names:
                    raise StatementRejected(f"'{token.value}' is another database or schema; "
                                            f"only this episode's own tables can be used")
