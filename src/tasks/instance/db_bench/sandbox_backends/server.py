"""What the server backends (MySQL/MariaDB, PostgreSQL) share: a namespace and a user of
the sandbox's own on a shared server, made when the sandbox opens and dropped when it
closes, and the model's session ended by the admin at the time limit's last bound."""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
from abc import abstractmethod

from sqlalchemy import Connection, Engine, create_engine, make_url
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from src.tasks.instance.db_bench.sandbox_backends.base import SandboxBackend, SandboxLimits

logger = logging.getLogger(__name__)

_PREFIX = "dbbench_"


@functools.cache
def admin_engine(url: str) -> Engine:
    """One engine per server URL, shared by the sandboxes that it creates and drops."""
    return create_engine(url, pool_pre_ping=True, isolation_level="AUTOCOMMIT",
                         execution_options={"no_parameters": True})


def _shown(url: str) -> str:
    """The URL for a message, its password hidden."""
    return make_url(url).render_as_string(hide_password=True)


class _ServerBackend(SandboxBackend):
    """A namespace and a user on a shared server, created now and dropped by close()."""

    def __init__(self, url: str, limits: SandboxLimits) -> None:
        super().__init__(limits)
        self.url = url
        self.name = _PREFIX + secrets.token_hex(6)
        self._password = secrets.token_hex(16)
        self._admin = self._admin_engine(url)
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
            raise RuntimeError(f"could not create a {self.dialect} sandbox on {_shown(url)}: "
                               f"{error}") from error

    def _connect(self) -> None:
        assert self._engine is not None
        self.connection = self._engine.connect()
        self._session = self._configure()

    def _admin_engine(self, url: str) -> Engine:
        """The engine that creates, measures and drops the sandbox's namespace and user."""
        return admin_engine(url)

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
        self._after_drop()

    def _after_drop(self) -> None:
        """What is left to do once the namespace and user are dropped (or failed to be)."""
