"""The databases of a PostgreSQL server that its sandboxes live in, one per open sandbox:
made as needed, kept for the next sandbox once one closes with nothing of its own left in
it, dropped otherwise and when the process exits."""

from __future__ import annotations

import atexit
import logging
import secrets
import threading

from sqlalchemy import Connection, Engine, create_engine, make_url
from sqlalchemy.pool import NullPool

from src.tasks.instance.db_bench.sandbox_backends.server import _PREFIX, admin_engine

logger = logging.getLogger(__name__)

# A database's objects that someone made have OIDs from FirstNormalObjectId on (initdb's
# own are below it): a database given back with none in these catalogs, but the bounds
# schemas that it keeps for the next sandboxes, holds nothing of its last sandbox's.
# Temporary schemas stay once made (empty when their session ends).
_FIRST_NORMAL_OID = 16384
_POSTGRES_BOUNDS_PREFIX = f"{_PREFIX}bounds_"
_POSTGRES_KEPT_SCHEMAS = (f"(SELECT oid FROM pg_catalog.pg_namespace WHERE nspname LIKE "
                          f"'{_POSTGRES_BOUNDS_PREFIX.replace('_', chr(92) + '_')}%')")
_POSTGRES_OBJECT_CATALOGS = (
    "pg_class", "pg_type", "pg_constraint", "pg_trigger", "pg_rewrite", "pg_policy",
    "pg_operator", "pg_opclass", "pg_opfamily", "pg_cast", "pg_collation", "pg_conversion",
    "pg_language", "pg_extension", "pg_largeobject_metadata", "pg_default_acl",
    "pg_statistic_ext", "pg_publication", "pg_ts_config", "pg_ts_dict", "pg_event_trigger",
    "pg_foreign_data_wrapper", "pg_foreign_server")
_POSTGRES_LEFT_OBJECTS = " + ".join(
    [f"(SELECT count(*) FROM pg_catalog.{catalog} WHERE oid >= {_FIRST_NORMAL_OID})"
     for catalog in _POSTGRES_OBJECT_CATALOGS]
    + [f"(SELECT count(*) FROM pg_catalog.pg_proc WHERE oid >= {_FIRST_NORMAL_OID} "
       f"AND pronamespace NOT IN {_POSTGRES_KEPT_SCHEMAS})",
       f"(SELECT count(*) FROM pg_catalog.pg_namespace WHERE oid >= {_FIRST_NORMAL_OID} "
       f"AND nspname !~ '^pg_(toast_)?temp_' AND oid NOT IN {_POSTGRES_KEPT_SCHEMAS})"])


class _PostgresDatabases:
    """The databases of one PostgreSQL server that its sandboxes live in, one per open
    sandbox: a database's catalogs (pg_class, pg_namespace, information_schema, its
    statistics views) list its own objects only, so no episode can list another's tables,
    as it could were each only a schema. A database is made from template0 with the
    encoding and locale of the URL's database (text sorts and compares as it would there)
    and only the sandbox's role may connect to it. Making and dropping one take 50-150 ms
    each, so a closed sandbox's database, once its schema and role are dropped and it holds
    no object made in it but its bounds schemas (the admin's, one per value limit), waits
    for the next sandbox; one that still holds something is dropped, and so are the
    waiting ones when the process exits."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._idle: list[str] = []
        self._engines: dict[str, Engine] = {}
        atexit.register(self.drop_idle)

    def acquire(self) -> str:
        """A database of no other open sandbox's, made now if none waits."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        name = f"{_PREFIX}db_{secrets.token_hex(6)}"
        with admin_engine(self._url).connect() as admin:
            admin.exec_driver_sql(f"CREATE DATABASE {name} TEMPLATE template0 "
                                  f"{self._locale(admin)}")
            admin.exec_driver_sql(f"REVOKE ALL ON DATABASE {name} FROM PUBLIC")
        return name

    def engine(self, name: str) -> Engine:
        """The admin's engine on database `name`: a connection per use (a sandbox makes two,
        some 10 ms each), none held between them, to keep the server's connections few."""
        with self._lock:
            if name not in self._engines:
                self._engines[name] = create_engine(
                    make_url(self._url).set(database=name), poolclass=NullPool,
                    isolation_level="AUTOCOMMIT", execution_options={"no_parameters": True})
            return self._engines[name]

    @staticmethod
    def objects_left(admin: Connection) -> int:
        """How many objects made in admin's database are left, but the bounds schemas."""
        return int(admin.exec_driver_sql(f"SELECT {_POSTGRES_LEFT_OBJECTS}").scalar_one())

    def release(self, name: str, empty: bool) -> None:
        """Database `name`'s sandbox is closed: kept for the next if `empty` (nothing but
        the bounds schemas is left in it), else dropped."""
        if empty:
            with self._lock:
                self._idle.append(name)
            return
        self._drop(name)

    def drop_idle(self) -> None:
        with self._lock:
            names, self._idle = self._idle, []
        for name in names:
            self._drop(name)

    def _drop(self, name: str) -> None:
        with self._lock:
            engine = self._engines.pop(name, None)
        if engine is not None:
            engine.dispose()
        try:
            with admin_engine(self._url).connect() as admin:
                admin.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        except Exception:  # a database left behind must not end the run; it is logged
            logger.exception("could not drop database %s", name)

    @staticmethod
    def _locale(admin: Connection) -> str:
        """CREATE DATABASE's options for the encoding and locale of admin's database."""
        [row] = admin.exec_driver_sql(
            "SELECT pg_catalog.to_jsonb(d) FROM pg_catalog.pg_database d "
            "WHERE d.datname = pg_catalog.current_database()").scalars().all()
        encoding = admin.exec_driver_sql(
            f"SELECT pg_catalog.pg_encoding_to_char({int(row['encoding'])})").scalar_one()
        options = {"ENCODING": encoding, "LC_COLLATE": row["datcollate"],
                   "LC_CTYPE": row["datctype"]}
        if row.get("datlocprovider") == "i":  # ICU (PostgreSQL 15 on)
            options |= {"LOCALE_PROVIDER": "icu",
                        "ICU_LOCALE": row.get("daticulocale") or row.get("datlocale")}
        return " ".join(f"{key} '{str(value).replace(chr(39), chr(39) * 2)}'"
                        if key != "LOCALE_PROVIDER" else f"{key} {value}"
                        for key, value in options.items())


_POSTGRES_DATABASES: dict[str, _PostgresDatabases] = {}
_POSTGRES_DATABASES_LOCK = threading.Lock()


def _postgres_databases(url: str) -> _PostgresDatabases:
    with _POSTGRES_DATABASES_LOCK:
        if url not in _POSTGRES_DATABASES:
            _POSTGRES_DATABASES[url] = _PostgresDatabases(url)
        return _POSTGRES_DATABASES[url]


def drop_kept_databases() -> None:
    """Drop the PostgreSQL databases kept for the next sandboxes now rather than when the
    process exits (a check that nothing is left on a server counts them)."""
    with _POSTGRES_DATABASES_LOCK:
        pools = list(_POSTGRES_DATABASES.values())
    for pool in pools:
        pool.drop_idle()
