"""The async engine and the two kinds of transaction: reads, and writes that serialize per session."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.util import await_only

from backend import jsoncodec
from backend.faults import InjectedFault

# How a failing database (or a fault point standing in for one) reaches the code above it: callers that
# must fail closed catch exactly these, so a programming error is never mistaken for an outage.
STORAGE_ERRORS = (SQLAlchemyError, OSError, InjectedFault)


def utcnow() -> dt.datetime:
    """The one clock every timestamp comes from."""
    return dt.datetime.now(dt.UTC)


# A pooled PostgreSQL connection idle longer than this is pinged before reuse (see `_install_hooks`).
IDLE_PING_SECONDS = 5.0


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
    ) -> None:
        self.url = url
        self.idle_ping_seconds = idle_ping_seconds
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        # JSON columns (message metadata, summaries) encode and decode with orjson.
        kwargs: dict[str, Any] = {
            "echo": echo,
            "json_serializer": jsoncodec.dumps,
            "json_deserializer": jsoncodec.loads,
        }
        if self.dialect == "sqlite":
            database = parsed.database or ""
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            kwargs["poolclass"] = NullPool if database in ("", ":memory:") else None
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
            # check_same_thread: statements of a write unit that holds the writer lock run on the
            # event loop's thread (see `prepared._inline_sqlite`), the rest on aiosqlite's thread.
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        else:
            kwargs.update(pool_size=pool_size, max_overflow=max(1, pool_size // 2))
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

        @event.listens_for(sync_engine, "before_cursor_execute")
        def _count(*_: Any) -> None:
            self.statements += 1

        if not self.is_sqlite:
            self._install_idle_ping()
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

        @event.listens_for(sync_engine, "begin")
        def _begin(conn: Any) -> None:
            immediate = conn.get_execution_options().get("turnwise_write", False)
            sql = "BEGIN IMMEDIATE" if immediate else "BEGIN"
            # Straight on the driver (one hop to aiosqlite's thread, where it may wait for the
            # writer lock) instead of SQLAlchemy's execution path, which cost more than the BEGIN;
            # counted and, on failure, translated and handled as that path would.
            self.statements += 1
            self.begins += 1
            try:
                await_only(conn.connection.dbapi_connection._connection.execute(sql))
            except BaseException as exc:  # noqa: BLE001 - re-raised by SQLAlchemy as its own error
                # As on SQLAlchemy's own path: a cancellation mid-BEGIN (which may still be waiting
                # for the lock on aiosqlite's thread) invalidates the connection, never pooling it.
                conn._handle_dbapi_exception(exc, sql, (), None, None)

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

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            self.transactions += 1
            async with conn.begin():
                yield conn

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            if self.is_sqlite:  # read by the BEGIN hook: writers take SQLite's writer lock up front
                conn = await conn.execution_options(turnwise_write=True)
            self.transactions += 1
            async with conn.begin():
                yield conn

    @asynccontextmanager
    async def alone(self) -> AsyncIterator[AsyncConnection]:
        """A connection that begins no transaction (PostgreSQL), for `prepared.run_alone`: the one
        message it sends is its own transaction."""
        async with self.engine.connect() as conn:
            self.transactions += 1
            yield conn

    async def dispose(self) -> None:
        await self.engine.dispose()
