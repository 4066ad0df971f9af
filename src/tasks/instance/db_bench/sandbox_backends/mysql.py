"""The MySQL/MariaDB backend: a database and a user granted table privileges on it alone,
a session without strict mode, results read through an unbuffered cursor, and the
tables' storage measured by the admin after each of the model's statements."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import URL

from src.tasks.instance.db_bench.sandbox_backends.base import Fetched, StatementFailed
from src.tasks.instance.db_bench.sandbox_backends.server import _ServerBackend
from src.tasks.instance.db_bench.sql_lexer import Dialect

# MySQL's values are bounded by max_allowed_packet only (16-64 MB), so a row of many such
# columns could be huge: a result whose columns' declared sizes, each at most that, add up
# to more is refused before a row is read (a table of TEXT columns declares 256 KB each).
_MYSQL_MAX_ROW_BYTES = 32 * 1024 * 1024
# No CREATE TEMPORARY TABLES: the server does not say how big a temporary table is, and
# one of the table's name hides the table from the grader, qualified or not.
_MYSQL_PRIVILEGES = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, CREATE VIEW, "
                     "SHOW VIEW")
_MYSQL_STRICT_MODES = frozenset({"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"})
# The server ignores DATA DIRECTORY and INDEX DIRECTORY (tables, partitions, ALTER TABLE):
# a table's files stay in the sandbox's database folder.
_MYSQL_ADDED_MODES = ("NO_DIR_IN_CREATE",)


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
