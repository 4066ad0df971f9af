"""Reading SQL text as tokens, per dialect: enough to count statements and check their words.

Comments are dropped from the code that is executed (MySQL's executable `/*! ... */`
comments and optimizer hints included), so the statement guard sees exactly what runs.
Quoting follows each dialect's defaults: in MySQL "..." is a string and backslashes
escape; in SQLite and PostgreSQL "..." names an identifier; PostgreSQL also has E'...'
strings, $tag$...$tag$ bodies and U&"..." / U&'...' forms whose Unicode escapes
(`\\0073`, `\\+000073`, or another escape character that a following UESCAPE '!' names)
are decoded, so that a quoted name is checked as the name the server sees. MySQL also
reads a bare name that starts with digits (`1952_British_Grand_Prix_0`) as a name; SQLite
and PostgreSQL need it quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

Dialect = Literal["sqlite", "mysql", "postgresql"]

# Longest first: a multi-character operator is one token, so that `>=` stays whole.
_OPERATORS = ("->>", "<=>", "->", ">=", "<=", "<>", "!=", "||", "::", ":=", "<<", ">>", "&&")
_MYSQL_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
# In MySQL a run of name characters that starts with a digit is a number only in these
# shapes (`1e` may go on with an exponent's sign and digits); any other run is a name.
_MYSQL_NUMBER = re.compile(r"\d+|\d+[eE]\d*|0x[0-9a-fA-F]+|0b[01]+")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class SqlLexError(ValueError):
    """The text cannot be read as SQL (an unterminated string, identifier or comment)."""


class TokenKind(StrEnum):
    WORD = "word"  # a keyword or an unquoted identifier
    IDENTIFIER = "identifier"  # a quoted identifier
    STRING = "string"
    NUMBER = "number"
    SYMBOL = "symbol"


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    start: int  # offsets into `ScannedSql.code`
    end: int
    value: str  # a quoted identifier or string unquoted; otherwise the text as written

    def is_word(self, *words: str) -> bool:
        return self.kind is TokenKind.WORD and self.value.upper() in words


@dataclass(frozen=True)
class ScannedSql:
    code: str  # the text without its comments (each comment became one space)
    tokens: tuple[Token, ...]

    def statements(self) -> list[tuple[Token, ...]]:
        """The non-empty statements, split at top-level semicolons."""
        found: list[tuple[Token, ...]] = []
        current: list[Token] = []
        for token in self.tokens:
            if token.kind is TokenKind.SYMBOL and token.value == ";":
                if current:
                    found.append(tuple(current))
                current = []
            else:
                current.append(token)
        if current:
            found.append(tuple(current))
        return found

    def text_of(self, statement: tuple[Token, ...]) -> str:
        return self.code[statement[0].start:statement[-1].end]


def scan(sql: str, dialect: Dialect) -> ScannedSql:
    return _Scanner(sql, dialect).run()


class _Scanner:
    def __init__(self, sql: str, dialect: Dialect) -> None:
        self.sql = sql
        self.dialect = dialect
        self.position = 0
        self.code: list[str] = []
        self.code_length = 0
        self.tokens: list[Token] = []
        self.unicode_escaped: list[int] = []  # indexes of U&"..." / U&'...' tokens

    def run(self) -> ScannedSql:
        sql = self.sql
        while self.position < len(sql):
            char = sql[self.position]
            if char.isspace():
                self._keep(self.position + 1)
            elif self._comment_starts():
                self._skip_comment()
            elif char == "'":
                self._string(self.position, backslash=self.dialect == "mysql")
            elif char == '"':
                if self.dialect == "mysql":
                    self._string(self.position, backslash=True)
                else:
                    self._quoted_identifier('"', '"')
            elif char == "`":
                self._quoted_identifier("`", "`")
            elif char == "[" and self.dialect == "sqlite":
                self._quoted_identifier("[", "]")
            elif char == "$" and self.dialect == "postgresql" and self._dollar_quote():
                pass
            elif char.isdigit() or (char == "." and sql[self.position + 1:self.position + 2].isdigit()):
                self._number()
            elif char.isalpha() or char == "_":
                self._word()
            else:
                operator = next((op for op in _OPERATORS if sql.startswith(op, self.position)), char)
                self._token(TokenKind.SYMBOL, self.position + len(operator), operator)
        for index in self.unicode_escaped:
            self._decode_unicode_escapes(index)
        return ScannedSql(code="".join(self.code), tokens=tuple(self.tokens))

    # ---- output --------------------------------------------------------------------
    def _keep(self, end: int) -> None:
        piece = self.sql[self.position:end]
        self.code.append(piece)
        self.code_length += len(piece)
        self.position = end

    def _token(self, kind: TokenKind, end: int, value: str) -> None:
        start = self.code_length
        self._keep(end)
        self.tokens.append(Token(kind, start, self.code_length, value))

    # ---- comments ------------------------------------------------------------------
    def _comment_starts(self) -> bool:
        rest = self.sql[self.position:self.position + 3]
        if rest.startswith("/*"):
            return True
        if rest.startswith("#"):
            return self.dialect == "mysql"
        if rest.startswith("--"):
            # MySQL reads `--` as a comment only when a space or control character follows
            return self.dialect != "mysql" or len(rest) == 2 or rest[2].isspace()
        return False

    def _skip_comment(self) -> None:
        sql = self.sql
        if sql.startswith("/*", self.position):
            depth, index = 1, self.position + 2
            while depth:
                if index >= len(sql):
                    raise SqlLexError(f"unterminated /* comment at character {self.position}")
                if sql.startswith("*/", index):
                    depth, index = depth - 1, index + 2
                elif self.dialect == "postgresql" and sql.startswith("/*", index):
                    depth, index = depth + 1, index + 2  # PostgreSQL nests block comments
                else:
                    index += 1
        else:
            newline = sql.find("\n", self.position)
            index = len(sql) if newline < 0 else newline
        self.position = index
        self.code.append(" ")
        self.code_length += 1

    # ---- literals and names --------------------------------------------------------
    def _string(self, quote_at: int, backslash: bool) -> None:
        """A string whose quote is at `quote_at` (after a prefix letter, if any)."""
        end, value = self._quoted(quote_at, self.sql[quote_at], doubled=True,
                                  backslash=backslash, what="string")
        self._token(TokenKind.STRING, end, value)

    def _quoted_identifier(self, opening: str, closing: str) -> None:
        end, value = self._quoted(self.position, closing, doubled=opening == closing,
                                  backslash=False, what="quoted name")
        self._token(TokenKind.IDENTIFIER, end, value)

    def _quoted(self, open_at: int, closing: str, doubled: bool, backslash: bool,
                what: str) -> tuple[int, str]:
        """(index after the closing character, the text inside) of a quoted string or name;
        a doubled closing character stands for itself, and so may a backslash escape."""
        sql, start = self.sql, self.position
        index, value = open_at + 1, []
        while True:
            if index >= len(sql):
                raise SqlLexError(f"unterminated {what} starting at character {start}")
            char = sql[index]
            if backslash and char == "\\" and index + 1 < len(sql):
                escaped = sql[index + 1]
                value.append(_MYSQL_ESCAPES.get(escaped, escaped) if self.dialect == "mysql"
                             else escaped)
                index += 2
            elif char == closing and doubled and sql[index + 1:index + 2] == closing:
                value.append(closing)
                index += 2
            elif char == closing:
                break
            else:
                value.append(char)
                index += 1
        return index + 1, "".join(value)

    def _unicode_escaped(self, quote_at: int) -> None:
        """PostgreSQL's U&"..." or U&'...' whose `U&` starts here; decoded once the
        statement is read, when a following UESCAPE is known."""
        string = self.sql[quote_at] == "'"
        end, value = self._quoted(quote_at, self.sql[quote_at], doubled=True, backslash=False,
                                  what="string" if string else "quoted name")
        self._token(TokenKind.STRING if string else TokenKind.IDENTIFIER, end, value)
        self.unicode_escaped.append(len(self.tokens) - 1)

    def _decode_unicode_escapes(self, index: int) -> None:
        token, following = self.tokens[index], self.tokens[index + 1:index + 3]
        escape = "\\"
        if len(following) == 2 and following[0].is_word("UESCAPE"):
            escape = following[1].value
            if (following[1].kind is not TokenKind.STRING or len(escape) != 1
                    or escape in _HEX_DIGITS or escape in "+'\"" or escape.isspace()):
                raise SqlLexError(f"invalid UESCAPE character after the U& text at character "
                                  f"{token.start}")
        self.tokens[index] = replace(token, value=_unescape_unicode(token.value, escape,
                                                                      token.start))

    def _dollar_quote(self) -> bool:
        sql, start = self.sql, self.position
        close = sql.find("$", start + 1)
        tag = sql[start:close + 1] if close > 0 else ""
        body = tag[1:-1]
        if not tag or not (body == "" or (body.replace("_", "a").isalnum() and not body[0].isdigit())):
            return False
        end = sql.find(tag, close + 1)
        if end < 0:
            raise SqlLexError(f"unterminated {tag} string starting at character {start}")
        self._token(TokenKind.STRING, end + len(tag), sql[close + 1:end])
        return True

    def _number(self) -> None:
        sql, index = self.sql, self.position
        if self.dialect == "mysql" and sql[index].isdigit():
            end = self._name_end(index)
            if not _MYSQL_NUMBER.fullmatch(sql[index:end]):
                self._token(TokenKind.WORD, end, sql[index:end])
                return
        while index < len(sql) and (sql[index].isalnum() or sql[index] in "._"):
            if sql[index] in "eE" and sql[index + 1:index + 2] in ("+", "-"):
                index += 1
            index += 1
        self._token(TokenKind.NUMBER, index, sql[self.position:index])

    def _name_end(self, index: int) -> int:
        sql = self.sql
        while index < len(sql) and (sql[index].isalnum() or sql[index] in "_$"):
            index += 1
        return index

    def _word(self) -> None:
        sql = self.sql
        index = self._name_end(self.position)
        word = sql[self.position:index]
        if (self.dialect == "postgresql" and word in ("U", "u") and sql[index:index + 1] == "&"
                and sql[index + 1:index + 2] in ("'", '"')):
            self._unicode_escaped(index + 1)
            return
        if index < len(sql) and sql[index] == "'" and word.upper() in ("E", "X", "B", "N"):
            # a prefixed string: E'..' (PostgreSQL escapes), X'..', B'..', N'..'
            self._string(index, backslash=self.dialect == "mysql" or (
                self.dialect == "postgresql" and word.upper() == "E"))
            return
        self._token(TokenKind.WORD, index, word)


def _unescape_unicode(text: str, escape: str, at: int) -> str:
    """The text of a U& string or name: `escape` + 4 hex digits, `escape` + '+' + 6 hex
    digits (a UTF-16 surrogate pair written as two escapes is joined) and a doubled
    `escape` for itself; anything else as written."""
    decoded: list[str] = []
    high_surrogate: int | None = None
    index = 0
    while index < len(text):
        if text[index] != escape or text[index + 1:index + 2] == escape:
            if high_surrogate is not None:
                break
            decoded.append(text[index])
            index += 1 if text[index] != escape else 2
            continue
        width, start = (6, index + 2) if text[index + 1:index + 2] == "+" else (4, index + 1)
        digits = text[start:start + width]
        if len(digits) != width or not set(digits) <= _HEX_DIGITS:
            raise SqlLexError(f"invalid Unicode escape in the U& text at character {at}")
        code, index = int(digits, 16), start + width
        if high_surrogate is not None:
            if not 0xDC00 <= code <= 0xDFFF:
                break
            code = 0x10000 + ((high_surrogate - 0xD800) << 10) + (code - 0xDC00)
            high_surrogate = None
        elif 0xD800 <= code <= 0xDBFF:
            high_surrogate = code
            continue
        if code == 0 or code > 0x10FFFF or 0xDC00 <= code <= 0xDFFF:
            raise SqlLexError(f"invalid Unicode escape in the U& text at character {at}")
        decoded.append(chr(code))
    if high_surrogate is not None:
        raise SqlLexError(f"invalid Unicode surrogate pair in the U& text at character {at}")
    return "".join(decoded)
