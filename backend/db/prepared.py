"""Prepared statements sent several to a message: `begin_with` (PostgreSQL).

`begin_with` starts a PostgreSQL transaction with its first statements in BEGIN's own message: a
unit of work's lock (and the summary row it holds) costs no round trip of its own. Each statement
is a `Prepared` (`backend/db/fast_path.py`, whose SQL text and parameter order these messages use),
prepared on the connection by name once (PREPARE) and executed by name with its values written as
literals.

It answers "cannot", having sent nothing, where the fast path is off (`TURNWISE_DB_FAST_PATH=0`)
or in pooler mode (`turnwise_pooler`: nothing prepared by name), so callers take their usual path.
Where the connection's prepared statements vanished, a message that begins its transaction is
redone after they are all forgotten (`backend/db/server_prepared.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asyncpg.exceptions import InvalidSQLStatementNameError  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db import driver_adapter as adapter
from backend.db.fast_path import FAST_PATH, POOLER, FastPathContext, Prepared
from backend.db.server_prepared import SERVER_PREPARED, forget_server_statements
from backend.domain.errors import BrokenInvariant


class _MessageTransaction:
    """The transaction a `begin_with` message began, as SQLAlchemy's asyncpg adapter holds one
    (`start`, `commit`, `rollback`): its commit and rollback are plain COMMIT and ROLLBACK on the
    driver connection, as asyncpg's own `Transaction` sends them."""

    __slots__ = ("_driver",)

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    async def start(self) -> None:
        raise BrokenInvariant("a message transaction is begun by its message")

    async def commit(self) -> None:
        await self._driver.execute("COMMIT")

    async def rollback(self) -> None:
        await self._driver.execute("ROLLBACK")


@dataclass(slots=True)
class _Message:
    """One simple-protocol message of prepared statements for a connection (see `begin_with`)."""

    conn: AsyncConnection
    sync: Any
    fairy: Any
    adapted: Any
    driver: Any
    # Each statement with its values as literals.
    statements: list[tuple[Prepared, list[str]]]
    # The set of names the connection has prepared.
    prepared: set[str]

    def parts(self, prepared: set[str]) -> tuple[list[str], list[str]]:
        """The message's statements, and the names it prepares: each statement is prepared once per
        connection, then executed by name (PostgreSQL parses and plans it once, not per message)."""
        dialect = self.conn.dialect
        parts: list[str] = []
        new: list[str] = []
        for statement, values in self.statements:
            name = statement.server_name(dialect)
            if name not in prepared and name not in new:
                parts.append(f"PREPARE {name} AS {statement.sql(dialect)}")
                new.append(name)
            parts.append(f"EXECUTE {name}({', '.join(values)})" if values else f"EXECUTE {name}")
        return parts, new

    async def send(self, prefix: str, redo_prefix: str) -> str:
        """Send `prefix` and the statements; where the connection's prepared statements vanished,
        drop and forget them all, then send `redo_prefix` and the statements, each prepared anew.
        The caller makes sure the first attempt's failure leaves nothing to undo but what
        `redo_prefix` undoes (the message begins its transaction, or is one)."""
        parts, new = self.parts(self.prepared)
        sql = prefix + ";".join(parts)
        context = FastPathContext(self.sync, sql, [], False)
        sql, params = adapter.before_cursor_execute(self.sync, sql, [], context, False)
        try:
            try:
                status: str = await self.driver.execute(sql)
            except InvalidSQLStatementNameError:
                await forget_server_statements(self.fairy, self.adapted, self.driver)
                self.prepared = set()
                parts, new = self.parts(self.prepared)
                status = await self.driver.execute(redo_prefix + "DEALLOCATE ALL;" + ";".join(parts))
                self.fairy.info[SERVER_PREPARED] = (self.driver, self.prepared)
        except BaseException as exc:
            if new:
                # A PREPARE outlives a failed transaction, or never ran: unknown from here on, so
                # this connection sends no more such messages.
                self.fairy.info[SERVER_PREPARED] = (self.driver, None)
            await self.conn.run_sync(adapter.raise_as_sqlalchemy, self.adapted, exc, sql, params, context)
            raise  # not reached: raise_as_sqlalchemy always raises
        self.prepared.update(new)
        adapter.after_cursor_execute(self.sync, sql, params, context, False)
        return status


async def _message(
    conn: AsyncConnection, statements: Sequence[tuple[Prepared, Mapping[str, Any]]]
) -> _Message | None:
    """The statements as one message, for a connection with no transaction begun (None: it cannot
    be, see `begin_with`)."""
    sync = conn.sync_connection
    if conn.dialect.driver != "asyncpg" or not statements or sync is None:
        return None
    options = sync.get_execution_options()
    if options.get(FAST_PATH) is False or options.get(POOLER) is not None:
        return None
    fairy = await conn.get_raw_connection() if sync.invalidated else sync.connection
    adapted: Any = fairy.dbapi_connection
    if adapter.transaction_begun(adapted) or not adapter.plain_transaction(adapted):
        return None
    driver = adapted.driver_connection
    if driver.is_in_transaction():
        return None
    dialect = conn.dialect
    known = fairy.info.get(SERVER_PREPARED)
    if known is None or known[0] is not driver:
        known = fairy.info[SERVER_PREPARED] = (driver, set())
    prepared: set[str] | None = known[1]
    if prepared is None:
        return None  # unknown since a failed message: this connection runs its statements as usual
    written: list[tuple[Prepared, list[str]]] = []
    for statement, params in statements:
        values = statement.literals(dialect, params)
        if values is None:
            return None
        written.append((statement, values))
    return _Message(conn, sync, fairy, adapted, driver, written, prepared)


async def begin_with(conn: AsyncConnection, *statements: tuple[Prepared, Mapping[str, Any]]) -> bool:
    """Begin the caller's transaction (PostgreSQL) with these statements in the same message as its
    BEGIN: one round trip instead of one more per statement. Their rows are not returned (a lock,
    a row held FOR UPDATE). Each statement of the message still gets its own snapshot, after the one
    before it (READ COMMITTED), exactly as when sent one by one.

    Each statement is prepared on the connection (PREPARE, in the first message that uses it) and
    executed by name with its values as literals, so PostgreSQL parses and plans it once per
    connection, as it does the statements asyncpg prepares.

    False, having sent nothing, where it cannot: not asyncpg, the fast path off, pooler mode (no
    named statements), a transaction already begun, an isolation level or access mode of its own, a
    value that is not safe as a literal, or a connection whose prepared statements are unknown since
    a failed message; the caller then runs the statements as usual. Counted as one statement.

    asyncpg has no call for "BEGIN and more in one message", so the message's transaction is
    registered as SQLAlchemy's adapter's transaction before the message is sent (its commit and
    rollback are COMMIT and ROLLBACK), so a failure mid-message leaves a transaction SQLAlchemy rolls
    back, and a lost connection or a cancellation invalidates it as `_run` does."""
    message = await _message(conn, statements)
    if message is None:
        return False
    adapter.register_transaction(message.adapted, _MessageTransaction(message.driver))
    # Redone after vanished statements: the failed transaction (nothing else of it ran) rolled back.
    await message.send("BEGIN;", "ROLLBACK;BEGIN;")
    return True
