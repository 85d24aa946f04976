"""The async engine and the two kinds of transaction: reads, and writes that serialize per session."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from backend import jsoncodec
from backend.config import db_fast_path, db_pooler
from backend.db import driver_adapter as adapter
from backend.db import health
from backend.db.fast_path import WRITE, begin_sqlite
from backend.db.fast_path import engine_options as fast_path_options
from backend.db.health import Health
from backend.db.server_prepared import install_repair
from backend.faults import InjectedFault

# How a failing database (or a fault point standing in for one) reaches the code above it: callers that
# must fail closed catch exactly these, so a programming error is never mistaken for an outage.
STORAGE_ERRORS = (SQLAlchemyError, OSError, InjectedFault)

log = logging.getLogger("turnwise.db")


def utcnow() -> dt.datetime:
    """The one clock every timestamp comes from."""
    return dt.datetime.now(dt.UTC)


# A pooled PostgreSQL connection idle longer than this is pinged before reuse (see `_install_hooks`).
IDLE_PING_SECONDS = 5.0
# While PostgreSQL is gone or frozen, a connect and each statement give up after these (and a unit
# waits at most CONNECT_TIMEOUT_SECONDS for a pooled connection): every operation then fails within
# about two of them, well inside the 5 s a person or an agent is promised.
CONNECT_TIMEOUT_SECONDS = 2.0
STATEMENT_TIMEOUT_SECONDS = 2.0


def unnamed_statement() -> str:
    """The name SQLAlchemy's asyncpg adapter prepares each statement under in pooler mode: the
    protocol's unnamed statement (each is prepared and run within one transaction, so on one server
    connection behind PgBouncer, and replaced by the next; nothing named is left on any server)."""
    return ""


class PoolerNotSet(SQLAlchemyError):
    """A PostgreSQL connection answers through a connection pooler while TURNWISE_DB_POOLER is unset:
    every statement the service prepares by name would then fail on the pooler's other server
    connections, so no connection is handed out (startup fails naming the setting)."""


def pooler_not_set_message(url: str) -> str:
    where = make_url(url)
    return (
        f"TURNWISE_DB_POOLER is unset, but the database at {where.host}:{where.port or 5432} answers "
        "through a connection pooler (its backend key is not the server process's id): set "
        "TURNWISE_DB_POOLER=pgbouncer for PgBouncer (see the README, Through PgBouncer), "
        "or connect to PostgreSQL directly"
    )


def _sqlite_engine_options(kwargs: dict[str, Any], parsed: URL, pooler: str | None) -> dict[str, Any]:
    """`create_async_engine`'s arguments for a SQLite file (made with its folder) or memory database."""
    if pooler is not None:
        raise ValueError(f"TURNWISE_DB_POOLER={pooler} needs PostgreSQL, not SQLite")
    database = parsed.database or ""
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    kwargs["poolclass"] = NullPool if database in ("", ":memory:") else None
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    # check_same_thread: statements of a write unit that holds the writer lock run on the
    # event loop's thread (see `fast_path._inline_sqlite`), the rest on aiosqlite's thread.
    kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
    return kwargs


def _postgres_engine_options(
    kwargs: dict[str, Any],
    *,
    pool_size: int,
    connect_timeout: float | None,
    statement_timeout: float | None,
    pooler: str | None,
) -> dict[str, Any]:
    """`create_async_engine`'s arguments for PostgreSQL: the pool, bounded waits, the pooler mode."""
    kwargs.update(pool_size=pool_size, max_overflow=max(1, pool_size // 2))
    # Bounded waits while the server is gone (see `health`): a connect, each statement (a
    # frozen server answers nothing), and a turn for a pooled connection.
    connect_args = kwargs.setdefault("connect_args", {})
    if connect_timeout is not None:
        connect_args["timeout"] = connect_timeout
        kwargs["pool_timeout"] = connect_timeout
    if statement_timeout is not None:
        connect_args["command_timeout"] = statement_timeout
    if pooler == "pgbouncer":
        # PgBouncer in transaction pooling: consecutive transactions may run on different
        # server connections, so nothing prepared under a name may outlive a transaction.
        # asyncpg's statement cache off (its `fetch` then uses the unnamed statement), and
        # SQLAlchemy's adapter's cache off with the name function its asyncpg dialect documents
        # for PgBouncer, giving the unnamed statement too (prepared and used in one
        # transaction, nothing left behind on any server); `prepared.begin_with` and
        # nothing is prepared (it answers "cannot").
        connect_args["statement_cache_size"] = 0
        connect_args["prepared_statement_cache_size"] = 0
        connect_args["prepared_statement_name_func"] = unnamed_statement
    return kwargs


class Database:
    """Owns the engine. `write()` takes SQLite's writer lock up front (BEGIN IMMEDIATE); on PostgreSQL
    writers serialize per session through advisory locks taken by the repository."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        pool_size: int = 20,
        idle_ping_seconds: float = IDLE_PING_SECONDS,
        connect_timeout: float | None = CONNECT_TIMEOUT_SECONDS,
        statement_timeout: float | None = STATEMENT_TIMEOUT_SECONDS,
        fast_path: bool | None = None,
        pooler: str | None = None,
    ) -> None:
        self.url = url
        # The fast path (`backend/db/fast_path.py`) and the pooler mode; None: from TURNWISE_DB_FAST_PATH (on
        # unless "0", "false", "no") and TURNWISE_DB_POOLER (unset, or "pgbouncer").
        self.fast_path = (
            db_fast_path(os.environ.get("TURNWISE_DB_FAST_PATH")) if fast_path is None else fast_path
        )
        self.pooler = db_pooler(os.environ.get("TURNWISE_DB_POOLER") if pooler is None else pooler)
        self.idle_ping_seconds = idle_ping_seconds
        self.health = Health()
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        # JSON columns (message metadata, summaries) encode and decode with orjson.
        kwargs: dict[str, Any] = {
            "echo": echo,
            "json_serializer": jsoncodec.dumps,
            "json_deserializer": jsoncodec.loads,
            # Read by the fast path on every connection of this engine (a connection may override them).
            "execution_options": fast_path_options(fast_path=self.fast_path, pooler=self.pooler),
        }
        if self.dialect == "sqlite":
            kwargs = _sqlite_engine_options(kwargs, parsed, self.pooler)
        else:
            kwargs = _postgres_engine_options(
                kwargs,
                pool_size=pool_size,
                connect_timeout=connect_timeout,
                statement_timeout=statement_timeout,
                pooler=self.pooler,
            )
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        # Statements and transactions run through this engine (tests and benches read them as counts).
        self.statements = 0
        # Of those, SQLite's BEGIN statements (`/metrics` counts statements other than BEGIN), and
        # how many `metrics.instrument` has reported so far.
        self.begins = 0
        self.statements_reported = 0
        self.transactions = 0
        self.pings = 0
        self.ping_listeners: list[Callable[[], None]] = []
        self._install_hooks()

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def _install_hooks(self) -> None:
        sync_engine = self.engine.sync_engine
        health.install(sync_engine, self.health, asyncpg=not self.is_sqlite)

        @event.listens_for(sync_engine, "before_cursor_execute")
        def _count(*_: Any) -> None:
            self.statements += 1

        if not self.is_sqlite:
            if self.pooler is None:
                self._install_pooler_check()
            self._install_idle_ping()
            # A connection whose prepared statements vanished (SQLSTATE 26000) is replaced.
            install_repair(sync_engine)
            return

        @event.listens_for(sync_engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            # Let us issue BEGIN ourselves so writers can take the lock up front.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        @event.listens_for(sync_engine.pool, "invalidate")
        def _release_writer_lock(dbapi_connection: Any, _record: Any, _exc: Any) -> None:
            # An invalidated connection (a statement cancelled mid-unit, say) is closed next; but a
            # `sqlite3` connection closed while a statement of it is unfinalized (the cancelled
            # cursor's) lingers as a "zombie" that keeps its open transaction and so SQLite's
            # writer lock, and every later writer waits out its busy timeout. A ROLLBACK first
            # (queued on aiosqlite's thread after the statement it still runs) ends that
            # transaction. Only inside one: a BEGIN still waiting there for the lock holds none,
            # and a ROLLBACK queued behind it would hold the cancelled unit's unwinding until the
            # lock's holder lets go. Outside a greenlet (the GC closing it) nothing can be awaited.
            try:
                if adapter.sqlite_connection(dbapi_connection.driver_connection).in_transaction:
                    dbapi_connection.run_async(lambda driver: driver.rollback())
            except (Exception, asyncio.CancelledError):  # best effort: the close follows
                log.debug("rollback of an invalidated SQLite connection failed", exc_info=True)

        @event.listens_for(sync_engine, "begin")
        def _begin(conn: Any) -> None:
            immediate = conn.get_execution_options().get(WRITE, False)
            sql = "BEGIN IMMEDIATE" if immediate else "BEGIN"
            # With the fast path straight on the driver, else through `exec_driver_sql`; either way
            # a statement to `before/after_cursor_execute` (so counted by `_count`) and the log.
            self.begins += 1
            begin_sqlite(conn, sql)

    def _install_pooler_check(self) -> None:
        """Refuse a connection that goes through a pooler while the pooler mode is off.

        PostgreSQL's BackendKeyData at connect carries the id of the server process serving the
        session; a pooler (PgBouncer in any pool mode) hands its client a key of its own instead, since
        the client's session is not bound to one server process. So a key that differs from
        `pg_backend_pid()` says a pooler sits between: one round trip per new connection, no guess
        about which server connection a later transaction lands on.
        """

        @event.listens_for(self.engine.sync_engine.pool, "connect")
        def _check(dbapi_connection: Any, _record: Any) -> None:
            key = int(dbapi_connection.driver_connection.get_server_pid())
            # A simple query (no arguments): nothing prepared or cached on the connection, and its
            # own transaction behind a pooler. The status tag says whether the row matched.
            query = f"SELECT WHERE pg_backend_pid() = {key}"
            if dbapi_connection.run_async(lambda driver: driver.execute(query)) == "SELECT 1":
                return
            # The pool forgets a connection whose connect hook failed without closing it.
            with contextlib.suppress(Exception):
                dbapi_connection.close()
            raise PoolerNotSet(pooler_not_set_message(self.url))

    def _install_idle_ping(self) -> None:
        """Ping a pooled connection only when it sat idle, instead of on every checkout.

        `pool_pre_ping` costs a BEGIN / `;` / ROLLBACK (a transaction at the server) per checkout: half
        the transactions of an ask -> answer cycle. A connection in steady use was just proven alive by
        its last transaction, so only one idle for `idle_ping_seconds` is pinged; a dead one is
        replaced before the caller sees it (`DisconnectionError` makes the pool retry). A connection
        that dies between two uses in quick succession fails that one transaction with a disconnect
        error, which invalidates the whole pool, so the next transaction reconnects.
        """
        pool = self.engine.sync_engine.pool
        dialect = self.engine.sync_engine.dialect

        @event.listens_for(pool, "checkin")
        def _checkin(_dbapi_connection: Any, record: Any) -> None:
            record.info["idle_since"] = time.monotonic()

        @event.listens_for(pool, "checkout")
        def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            since = record.info.get("idle_since")
            if since is None or time.monotonic() - since < self.idle_ping_seconds:
                return
            self.pings += 1
            for listener in self.ping_listeners:
                listener()
            try:
                dialect.do_ping(dbapi_connection)
            except dialect.loaded_dbapi.Error as exc:
                if dialect.is_disconnect(exc, dbapi_connection, None):
                    raise DisconnectionError("idle connection is gone") from exc
                raise

    def read(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        return self._transaction(write=False)

    def write(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        return self._transaction(write=True)

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        opened = False
        try:
            async with self.engine.connect() as conn:
                opened = True
                if write and self.is_sqlite:  # read by the BEGIN hook: writers take the writer lock up front
                    conn = await conn.execution_options(turnwise_write=True)
                self.transactions += 1
                async with conn.begin():
                    yield conn
        except Exception as exc:
            self._raise_outage(exc, connecting=not opened)
            raise

    def _raise_outage(self, exc: Exception, *, connecting: bool) -> None:
        """Mark the database down on an outage; a connect's raw refusal, timeout or lost connection
        (which the driver raises as it is, also from the pool's connect hook's first query) is
        raised as `DatabaseOutage`. Returns for anything else."""
        if connecting and health.driver_outage(exc):
            self.health.failed(exc)
            raise health.DatabaseOutage(None, None, exc, connection_invalidated=True) from exc
        if health.is_outage(exc):
            self.health.failed(exc)

    async def probe(self) -> bool:
        """One round trip on a pooled connection: does the database answer now? (Marks the health.)"""
        opened = False
        try:
            async with self.engine.connect() as conn:
                opened = True
                await conn.exec_driver_sql("SELECT 1")
        except Exception as exc:
            try:
                self._raise_outage(exc, connecting=not opened)
            except health.DatabaseOutage:
                return False
            if health.is_outage(exc):
                return False
            raise
        self.health.answered()
        return True

    async def dispose(self) -> None:
        await self.engine.dispose()
