"""Hot statements compiled once per dialect and run straight on the transaction's driver connection.

SQLAlchemy's execution path (compiled-cache lookup, execution context, parameter and result
metadata set-up) costs several times the round trip of a small statement: on a 2-core machine about
0.4 ms of CPU against 0.13 ms for the round trip itself. The ask -> answer cycle runs 18 such
statements. A `Prepared` keeps everything SQLAlchemy decides once — the SQL text of the dialect,
the order of the positional parameters, the bind and result processors of the statement's own
types (so values come back exactly as `conn.execute` would return them) — and on each call only
processes the parameters and runs the text on the driver connection of the caller's transaction:
asyncpg's `fetch` (with its own prepared-statement cache) or, on SQLite, the connection itself
inside a write unit that holds the writer lock (`_inline_sqlite`), else aiosqlite's `execute_fetchall`.

What stays SQLAlchemy's: the transaction (begun by `Database.read()/write()`; on asyncpg SQLAlchemy
starts it lazily, so the first prepared statement of a transaction starts it the same way), the
`before_cursor_execute` event (statement counters see these statements too) and error handling: a
driver error is translated and raised as the same `sqlalchemy.exc.DBAPIError` subclass, and a lost
connection invalidates the pool exactly as through `conn.execute`.

Only statements whose parameters are all plain binds qualify (no expanding `IN` lists, no literal
execution) and inserts must not rely on Python-side column defaults; both are refused when the
statement is first compiled.

`begin_with` starts a PostgreSQL transaction with its first statements in BEGIN's own message: a
unit of work's lock (and the summary row it holds) costs no round trip of its own.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from asyncpg.transaction import TransactionState  # type: ignore[import-untyped]
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler

from backend.domain.errors import BrokenInvariant

# Values `begin_with` may write into its message as literals: ids and keys of our own alphabet
# (nothing to escape, so nothing to get wrong); anything else makes it fall back to bind parameters.
_SAFE_TEXT = re.compile(r"[A-Za-z0-9_.:\-]{0,200}")


class Row(tuple[Any, ...]):
    """Attribute and index access like SQLAlchemy's `Row`; `_mapping` for access by name."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))


def _row_class(keys: Sequence[str]) -> type[Row]:
    base = collections.namedtuple("_Base", keys)  # type: ignore[misc]
    return type("Row", (base, Row), {"__slots__": ()})


@dataclass(frozen=True, slots=True)
class _Plan:
    sql: str
    # Per positional parameter: the caller's parameter name, or None with a fixed value.
    params: tuple[tuple[str | None, Any, Callable[[Any], Any] | None], ...]
    row: type[Row] | None
    processors: tuple[Callable[[Any], Any] | None, ...]
    asyncpg: bool
    # The name `begin_with` prepares it under on a connection.
    server_name: str


class Prepared:
    """One statement, compiled on first use per dialect; call it with the caller's transaction."""

    __slots__ = ("_plans", "statement")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._plans: dict[str, _Plan] = {}

    def _plan(self, dialect: Dialect) -> _Plan:
        plan = self._plans.get(dialect.name)
        if plan is None:
            plan = self._plans[dialect.name] = _compile(self.statement, dialect)
        return plan

    async def rows(self, conn: AsyncConnection, params: Mapping[str, Any] | None = None) -> list[Any]:
        """Every row the statement returns (processed like `conn.execute` would)."""
        plan = self._plan(conn.dialect)
        args = _arguments(plan, params or {})
        raw = await _run(conn, plan, args)
        row, processors = plan.row, plan.processors
        if row is None:
            return []
        new = tuple.__new__
        if any(processors):
            return [new(row, [p(v) if p else v for p, v in zip(processors, r, strict=True)]) for r in raw]
        return [new(row, r) for r in raw]

    async def many(self, conn: AsyncConnection, params: Sequence[Mapping[str, Any]]) -> None:
        """Run a statement that returns no rows once per parameter set (one round trip on asyncpg)."""
        plan = self._plan(conn.dialect)
        if plan.row is not None:
            raise BrokenInvariant("many() is for statements without RETURNING")
        if len(params) == 1:
            await _run(conn, plan, _arguments(plan, params[0]))
        elif params:
            await _run(conn, plan, [_arguments(plan, each) for each in params], many=True)

    async def first(self, conn: AsyncConnection, params: Mapping[str, Any] | None = None) -> Any:
        found = await self.rows(conn, params)
        return found[0] if found else None

    def literals(self, dialect: Dialect, params: Mapping[str, Any]) -> list[str] | None:
        """The parameters written as SQL literals, in order; None when one of them is not a plain
        integer, a text of the safe alphabet or a timestamp with its time zone."""
        values: list[str] = []
        for arg in _arguments(self._plan(dialect), params):
            if isinstance(arg, str):
                if not _SAFE_TEXT.fullmatch(arg):
                    return None
                values.append(f"'{arg}'")
            elif isinstance(arg, int) and not isinstance(arg, bool):
                values.append(str(arg))
            elif isinstance(arg, dt.datetime) and arg.tzinfo is not None:
                values.append(f"'{arg.isoformat()}'")  # digits, '-', ':', '.', '+' and 'T' only
            else:
                return None
        return values

    def server_name(self, dialect: Dialect) -> str:
        """The name of this statement prepared on a connection by `begin_with` (from its SQL)."""
        return self._plan(dialect).server_name


# Per connection (in its pool record's `info`): the driver connection and the names `begin_with`
# prepared on it, or None once a message that prepared one failed (whether it took is unknown; the
# connection then runs its statements the usual way).
_SERVER_PREPARED = "turnwise_server_prepared"


@dataclass(slots=True)
class _Message:
    """One simple-protocol message of prepared statements for a connection (see `begin_with`)."""

    conn: AsyncConnection
    fairy: Any
    adapted: Any
    driver: Any
    parts: list[str]
    # Names this message prepares, and the set of names the connection has.
    new: list[str]
    prepared: set[str]

    async def send(self, sql: str) -> str:
        sync = self.conn.sync_connection
        if sync is not None and (sync._has_events or sync.engine._has_events):
            sync.dispatch.before_cursor_execute(sync, None, sql, [], None, False)
        try:
            status: str = await self.driver.execute(sql)
        except BaseException as exc:
            if self.new:
                # A PREPARE outlives a failed transaction, or never ran: unknown from here on, so
                # this connection sends no more such messages.
                self.fairy.info[_SERVER_PREPARED] = (self.driver, None)
            await self.conn.run_sync(_raise_translated, self.adapted, exc, sql, [])
            raise  # not reached: _raise_translated always raises
        self.prepared.update(self.new)
        return status


async def _message(
    conn: AsyncConnection, statements: Sequence[tuple[Prepared, Mapping[str, Any]]]
) -> _Message | None:
    """The statements as one message, for a connection with no transaction begun (None: it cannot
    be, see `begin_with`)."""
    if conn.dialect.driver != "asyncpg" or not statements:
        return None
    sync = conn.sync_connection
    fairy = None if sync is None or sync.invalidated else sync._dbapi_connection
    if fairy is None:
        fairy = await conn.get_raw_connection()
    adapted: Any = fairy.dbapi_connection
    if adapted._transaction is not None or adapted.isolation_level is not None:
        return None
    if adapted.readonly or adapted.deferrable:
        return None
    driver = adapted._connection
    if driver._top_xact is not None or driver.is_in_transaction():
        return None
    dialect = conn.dialect
    known = fairy.info.get(_SERVER_PREPARED)
    if known is None or known[0] is not driver:
        known = fairy.info[_SERVER_PREPARED] = (driver, set())
    prepared: set[str] | None = known[1]
    if prepared is None:
        return None  # unknown since a failed message: this connection runs its statements as usual
    parts: list[str] = []
    new: list[str] = []
    for statement, params in statements:
        values = statement.literals(dialect, params)
        if values is None:
            return None
        # Prepared once per connection, then executed by name: PostgreSQL parses and plans it once,
        # instead of on every message.
        name = statement.server_name(dialect)
        if name not in prepared and name not in new:
            parts.append(f"PREPARE {name} AS {statement._plan(dialect).sql}")
            new.append(name)
        parts.append(f"EXECUTE {name}({', '.join(values)})" if values else f"EXECUTE {name}")
    return _Message(conn, fairy, adapted, driver, parts, new, prepared)


async def begin_with(conn: AsyncConnection, *statements: tuple[Prepared, Mapping[str, Any]]) -> bool:
    """Begin the caller's transaction (PostgreSQL) with these statements in the same message as its
    BEGIN: one round trip instead of one more per statement. Their rows are not returned (a lock,
    a row held FOR UPDATE). Each statement of the message still gets its own snapshot, after the one
    before it (READ COMMITTED), exactly as when sent one by one.

    Each statement is prepared on the connection (PREPARE, in the first message that uses it) and
    executed by name with its values as literals, so PostgreSQL parses and plans it once per
    connection, as it does the statements asyncpg prepares.

    False, having sent nothing, where it cannot: not asyncpg, a transaction already begun, an
    isolation level or access mode of its own, a value that is not safe as a literal, or a connection
    whose prepared statements are unknown since a failed message; the caller then runs the
    statements as usual. Counted as one statement.

    asyncpg has no call for "BEGIN and more in one message", so this drives its transaction state as
    `Transaction.start()` would: the transaction is registered (asyncpg's and SQLAlchemy's) before
    the message is sent, so a failure mid-message leaves a transaction SQLAlchemy rolls back, and a
    lost connection or a cancellation invalidates it as `_run` does."""
    message = await _message(conn, statements)
    if message is None:
        return False
    transaction = message.driver.transaction()
    message.driver._top_xact = transaction
    transaction._state = TransactionState.STARTED
    message.adapted._transaction = transaction
    await message.send("BEGIN;" + ";".join(message.parts))
    return True


async def run_alone(conn: AsyncConnection, *statements: tuple[Prepared, Mapping[str, Any]]) -> int | None:
    """Run these statements (PostgreSQL) as a transaction of their own, in one message and one round
    trip: with no BEGIN, PostgreSQL runs a message's statements as one implicit transaction, commits
    it when the last one succeeded and rolls all of it back when one fails. Each statement still gets
    its own snapshot, after the one before it. For a unit that needs nothing back but how many rows
    its last statement returned (the number, None where it cannot: see `begin_with`; the caller then
    runs the statements as usual). `conn` must not have begun a transaction (`Database.alone()`).
    Counted as one statement and, through SQLAlchemy's commit and rollback events, one transaction."""
    message = await _message(conn, statements)
    if message is None:
        return None
    sync = conn.sync_connection
    try:
        status = await message.send(";".join(message.parts))
    except Exception:
        if sync is not None:
            sync.dispatch.rollback(sync)
        raise
    if sync is not None:
        sync.dispatch.commit(sync)
    verb, _, count = status.rpartition(" ")
    if verb != "SELECT" or not count.isdigit():
        raise BrokenInvariant(f"a message's last statement reported {status!r}, not rows")
    return int(count)


def _compile(statement: Executable, dialect: Dialect) -> _Plan:
    compiled = cast(Any, statement).compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler) or not compiled.positional:
        raise BrokenInvariant(f"{dialect.name}: a prepared statement needs positional parameters")
    if compiled.insert_prefetch or compiled.update_prefetch or compiled.literal_execute_params:
        raise BrokenInvariant("a prepared statement cannot rely on Python-side defaults or literal execution")
    # The caller's parameters: binds given no value in the statement.
    required = {b.key for b in compiled.binds.values() if b.required}
    processors: Mapping[str, Any]
    if compiled.post_compile_params:
        # IN lists of constants (the active-rows rule's statuses, say) are rendered as one bind per
        # value, once; an IN list of the caller's values cannot be.
        if any(b.key in required for b in compiled.post_compile_params):
            raise BrokenInvariant("a prepared statement cannot expand an IN list of the caller's values")
        placeholders = compiled.construct_params({k: None for k in required}, _check=False)
        expanded = compiled._process_parameters_for_postcompile(placeholders)
        if expanded.positiontup is None:
            raise BrokenInvariant("a rendered statement has no expanded state")
        sql, names = expanded.statement, expanded.positiontup
        # The expanded state's processors cover the expanded binds only: the others' stay the
        # compiled statement's.
        values, processors = expanded.parameters, {**compiled._bind_processors, **expanded.processors}
    else:
        if compiled.positiontup is None:
            raise BrokenInvariant("a positional statement without its parameter order")
        sql, names = compiled.string, compiled.positiontup
        values, processors = compiled.construct_params(_check=False), compiled._bind_processors
    params: list[tuple[str | None, Any, Callable[[Any], Any] | None]] = []
    for name in names:
        proc: Any = processors.get(name)
        if name in required:
            params.append((name, None, proc))
        else:
            value = values[name]
            params.append((None, proc(value) if proc else value, None))
    row: type[Row] | None = None
    result_processors: tuple[Callable[[Any], Any] | None, ...] = ()
    if compiled._result_columns:
        keys = [c.keyname for c in compiled._result_columns]
        row = _row_class(keys)
        result_processors = tuple(
            c.type._cached_result_processor(dialect, None) for c in compiled._result_columns
        )
    return _Plan(
        sql=sql,
        params=tuple(params),
        row=row,
        processors=result_processors,
        asyncpg=dialect.driver == "asyncpg",
        server_name="turnwise_" + hashlib.sha256(sql.encode()).hexdigest()[:24],
    )


def _arguments(plan: _Plan, params: Mapping[str, Any]) -> list[Any]:
    args = []
    for name, fixed, proc in plan.params:
        if name is None:
            args.append(fixed)
            continue
        try:
            value = params[name]
        except KeyError:
            raise BrokenInvariant(f"prepared statement parameter {name!r} not given") from None
        args.append(proc(value) if proc is not None else value)
    return args


async def _run(
    conn: AsyncConnection, plan: _Plan, args: list[Any], *, many: bool = False
) -> Sequence[Sequence[Any]]:
    sync = conn.sync_connection
    fairy = None if sync is None or sync.invalidated else sync._dbapi_connection
    if fairy is None:
        fairy = await conn.get_raw_connection()
    adapted: Any = fairy.dbapi_connection
    if sync is not None and (sync._has_events or sync.engine._has_events):
        sync.dispatch.before_cursor_execute(sync, None, plan.sql, args, None, False)
    driver = adapted._connection
    try:
        if plan.asyncpg:
            if adapted._transaction is None:
                await adapted._start_transaction()
            if many:
                await driver.executemany(plan.sql, args)
                return []
            return await driver.fetch(plan.sql, *args)  # type: ignore[no-any-return]
        inline = _inline_sqlite(sync, driver)
        if inline is not None:
            if many:
                inline.executemany(plan.sql, args)
                return []
            return inline.execute(plan.sql, args).fetchall()
        if many:
            await driver.executemany(plan.sql, args)
            return []
        return await driver.execute_fetchall(plan.sql, args)  # type: ignore[no-any-return]
    except BaseException as exc:
        # Translated and re-raised as SQLAlchemy's own error. As in SQLAlchemy, a cancellation that
        # lands mid-statement (or mid-BEGIN) leaves the connection in an unknown state: it is
        # invalidated, never pooled again.
        await conn.run_sync(_raise_translated, adapted, exc, plan.sql, args)
        raise  # not reached: _raise_translated always raises


def _inline_sqlite(sync: Any, driver: Any) -> sqlite3.Connection | None:
    """The SQLite connection itself, when a statement may run on the event loop's own thread.

    aiosqlite runs every call on the connection's worker thread and hands the result back through
    the loop: two thread switches, which cost several times what a small indexed statement does.
    Inside a write transaction that already holds SQLite's writer lock (`Database.write()` begins
    with BEGIN IMMEDIATE) a statement waits for nothing (WAL readers never block a writer), so it
    runs in place. BEGIN, which may wait for the lock, and COMMIT, which may checkpoint the WAL, stay
    on the worker thread; so do statements of read transactions. The unit awaits every call, so the
    connection is never used by both threads at once.
    """
    if sync is None or not sync.get_execution_options().get("turnwise_write", False):
        return None
    raw: sqlite3.Connection = driver._conn
    return raw if raw.in_transaction else None


def _raise_translated(sync: Any, adapted: Any, exc: BaseException, sql: str, args: list[Any]) -> None:
    # SQLAlchemy reads the exception being handled (sys.exc_info()): raise it here to handle it.
    if not isinstance(exc, Exception):
        try:
            raise exc
        except BaseException as exiting:  # noqa: BLE001 - handed to SQLAlchemy, which re-raises it
            sync._handle_dbapi_exception(exiting, sql, args, None, None)  # invalidates, re-raises
    try:
        handle = getattr(adapted, "_handle_exception", None)
        if handle is not None:
            handle(exc)  # raises the adapted DBAPI error
        raise exc
    except Exception as dbapi_error:  # noqa: BLE001 - wrapped by SQLAlchemy (and the pool invalidated on a disconnect)
        sync._handle_dbapi_exception(dbapi_error, sql, args, None, None)
