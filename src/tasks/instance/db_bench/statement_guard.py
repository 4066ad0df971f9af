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

It also refuses what would get past the sandbox's storage or value bounds where the
server has no bound of its own: on MySQL/MariaDB temporary tables (unmeasured), table
options that name a place on disk (DATA/INDEX DIRECTORY, which the server also ignores)
and engines other than InnoDB, MyISAM, Aria and MEMORY; on PostgreSQL a format() whose
widths come from elsewhere than its literal first argument or add up past the value
limit, VARIADIC (an array of any length spread over a function's arguments) and padded
types (char(n), bit(n)) longer than the value limit. PostgreSQL's other value-building
functions are bounded in the database (see sandbox_backends).
"""

from __future__ import annotations

import re
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


# MySQL engines whose tables stay in the sandbox's database folder and that the sandbox
# measures; a name of another engine after ENGINE is refused.
_MYSQL_ENGINES = frozenset({"INNODB", "MYISAM", "ARIA", "MEMORY", "HEAP"})
_MYSQL_OTHER_ENGINES = frozenset({
    "CSV", "MRG_MYISAM", "MERGE", "SEQUENCE", "ARCHIVE", "BLACKHOLE", "FEDERATED",
    "FEDERATEDX", "CONNECT", "SPIDER", "OQGRAPH", "ROCKSDB", "S3", "TOKUDB", "MROONGA",
    "SPHINX", "COLUMNSTORE", "EXAMPLE", "NDB", "NDBCLUSTER", "PERFORMANCE_SCHEMA"})
# PostgreSQL types that pad a value to the length in their modifier: units per byte.
_PADDED_TYPES = {"CHAR": 1, "CHARACTER": 1, "NCHAR": 1, "BPCHAR": 1, "BIT": 8}
_FORMAT_SPEC = re.compile(r"%([0-9$*-]*)(.?)", re.DOTALL)


class StatementRejected(ValueError):
    """The statement may not run in the sandbox; the message says why, for the agent."""


@dataclass(frozen=True)
class StatementGuard:
    dialect: Dialect
    foreign_namespaces: frozenset[str]  # lower-cased names of other databases or schemas
    own_names: frozenset[str] = frozenset()  # lower-cased table names that may shadow them
    # the longest value one call may build (PostgreSQL's format widths and padded types);
    # None: not checked
    max_value_bytes: int | None = None

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
        if self.dialect == "mysql":
            self._check_mysql_storage(statement)
        elif self.dialect == "postgresql":
            self._check_postgresql_values(statement)
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

    def _check_mysql_storage(self, statement: tuple[Token, ...]) -> None:
        if not statement[0].is_word("CREATE", "ALTER"):
            return
        for token in statement[1:]:
            if token.is_word("TABLE", "VIEW", "INDEX"):
                break
            if token.is_word("TEMPORARY", "TEMP"):
                raise StatementRejected("temporary tables are not allowed in this sandbox (their "
                                        "size cannot be measured); create a table")
        for index, token in enumerate(statement[:-1]):
            following = statement[index + 1]
            if token.is_word("DATA", "INDEX") and following.is_word("DIRECTORY"):
                raise StatementRejected(f"{token.value} DIRECTORY is not allowed in this "
                                        f"sandbox: tables stay in its own database")
            if token.is_word("ENGINE"):
                named = statement[index + 2] if (following.kind is TokenKind.SYMBOL and
                                                 following.value == "=" and
                                                 index + 2 < len(statement)) else following
                engine = named.value.upper()
                if engine not in _MYSQL_ENGINES and (named is not following or
                                                     engine in _MYSQL_OTHER_ENGINES):
                    raise StatementRejected(f"the {named.value} engine is not allowed in this "
                                            f"sandbox; use InnoDB, MyISAM, Aria or MEMORY")

    def _check_postgresql_values(self, statement: tuple[Token, ...]) -> None:
        for index, token in enumerate(statement):
            if token.is_word("VARIADIC"):
                raise StatementRejected("VARIADIC is not allowed in this sandbox; pass a "
                                        "function its arguments one by one")
            if self.max_value_bytes is None or token.kind not in (TokenKind.WORD,
                                                                  TokenKind.IDENTIFIER):
                continue
            call = statement[index + 1:index + 4]
            if len(call) < 3 or call[0].kind is not TokenKind.SYMBOL or call[0].value != "(":
                continue
            name = token.value.upper()
            if name == "FORMAT":
                self._check_format(call[1], call[2])
            elif (name in _PADDED_TYPES and token.kind is TokenKind.WORD
                  and call[1].kind is TokenKind.NUMBER and call[2].value == ")"):
                length = int(call[1].value) if call[1].value.isdigit() else 0
                if length > self.max_value_bytes * _PADDED_TYPES[name]:
                    raise StatementRejected(f"{token.value}({call[1].value}) is longer than "
                                            f"the sandbox's value limit "
                                            f"({self.max_value_bytes} bytes)")

    def _check_format(self, first: Token, following: Token) -> None:
        """format()'s widths, from its literal format string, add up to at most the value
        limit; PostgreSQL pads without looking for a cancel request."""
        assert self.max_value_bytes is not None
        if first.kind is not TokenKind.STRING or following.value not in (",", ")") \
                or following.kind is not TokenKind.SYMBOL:
            raise StatementRejected("format() takes a string literal as its format in this "
                                    "sandbox, so that its widths can be checked")
        total = 0
        for spec, _ in _FORMAT_SPEC.findall(first.value):
            if "*" in spec:
                raise StatementRejected("format() widths from arguments (*) are not allowed "
                                        "in this sandbox; write the width in the format")
            width = re.sub(r"^\d+\$", "", spec).lstrip("-")  # the position, then the flag
            total += int(width) if width.isdigit() else 0
            if total > self.max_value_bytes:
                raise StatementRejected(f"format() widths add up to more than the sandbox's "
                                        f"value limit ({self.max_value_bytes} bytes)")
