"""Hot statements compiled once per dialect and run straight on the transaction's driver connection.

SQLAlchemy's execution path (compiled-cache lookup, execution context, parameter and result
metadata set-up) costs several times the round trip of a small statement: on a 2-core machine about
0.4 ms of CPU against 0.13 ms for the round trip itself. The ask -> answer cycle runs 18 such
statements. A `Prepared` keeps everything SQLAlchemy decides once — the SQL text of the dialect,
the order of the positional parameters, the bind and result processors of the statement's own
types (so values come back exactly as `conn.execute` would return them) — and on each call only
processes the parameters and runs the text on the driver connection of the caller's transaction:
asyncpg's `fetch` (with its own prepared-statement cache, off in pooler mode) or, on SQLite, the
connection itself inside a write unit that holds the writer lock (`_inline_sqlite`), else
aiosqlite's `execute_fetchall`.

What stays SQLAlchemy's: the transaction (begun by `Database.read()/write()`; on asyncpg SQLAlchemy
starts it lazily, so the first prepared statement of a transaction starts it the same way), the
`before_cursor_execute` and `after_cursor_execute` events, in pairs, with SQLAlchemy's arguments
(statement counters and instrumentation such as OpenTelemetry's see these statements too; the
context is a `FastPathContext`), the `sqlalchemy.engine` log (`echo=True`), and error handling: a
driver error is translated and raised as the same `sqlalchemy.exc.DBAPIError` subclass, through the
`handle_error` event, and a lost connection invalidates the pool exactly as through `conn.execute`.
The private names of SQLAlchemy and aiosqlite this needs are all in `backend/db/driver_adapter.py`.

The switch: the engine's execution option `turnwise_fast_path` (`Database(fast_path=...)`,
`TURNWISE_DB_FAST_PATH=0`; a connection's own option overrides it). Off, every call is
`conn.execute(statement, params)`. `turnwise_pooler` ("pgbouncer") keeps the fast path but prepares
nothing by name (see `Database`, which also turns asyncpg's statement caches off).

Only statements whose parameters are all plain binds qualify (no expanding `IN` lists, no literal
execution), whose result columns are labels or named columns, and inserts must not rely on
Python-side column defaults; each is refused when the statement is first compiled.

A statement that fails because the connection's server-prepared statements vanished (SQLSTATE
26000) is redone here, transparently, where it was the first of its transaction; what is forgotten
then, and what happens anywhere else, is `backend/db/server_prepared.py`. Several statements sent
as one message (`begin_with`) are `backend/db/prepared.py`: it writes each statement
of this module by the SQL text, parameter order and conversions `Prepared` keeps, so the two agree.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import logging
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from asyncpg.exceptions import InvalidSQLStatementNameError  # type: ignore[import-untyped]
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnClause, Label
from sqlalchemy.util import await_only

from backend.db import driver_adapter as adapter
from backend.db.server_prepared import forget_server_statements
from backend.domain.errors import BrokenInvariant

# Engine (or connection) execution options read here; `Database` sets them on its engine.
FAST_PATH = "turnwise_fast_path"
POOLER = "turnwise_pooler"
# Read by the SQLite inline path and the BEGIN hook: a write unit (BEGIN IMMEDIATE).
WRITE = "turnwise_write"

log = logging.getLogger("turnwise.db")

# Values `begin_with` may write into its message as literals: ids and keys of our own alphabet
# (nothing to escape, so nothing to get wrong); anything else makes it fall back to bind parameters.
_SAFE_TEXT = re.compile(r"[A-Za-z0-9_.:\-]{0,200}")


def engine_options(*, fast_path: bool, pooler: str | None) -> dict[str, Any]:
    """The execution options `Database` gives its engine."""
    return {FAST_PATH: fast_path, POOLER: pooler}


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


class FastPathContext:
    """The `context` the fast path passes to `before_cursor_execute`, `after_cursor_execute` and
    (as `ExceptionContext.execution_context`) `handle_error`, where SQLAlchemy passes its execution
    context: one object per statement, the same for its before and after, so listeners that keep
    their own state on it (OpenTelemetry keeps its span there) pair them. `compiled` is None (as
    for `exec_driver_sql`), and so is `cursor`: the statement runs on the driver connection."""

    compiled = None
    cursor = None
    isddl = False
    is_crud = False

    def __init__(
        self, connection: Any, statement: str, parameters: Any, executemany: bool, invoked: Any = None
    ) -> None:
        self.root_connection = self.connection = connection
        self.statement = statement
        self.parameters = parameters
        self.executemany = executemany
        # The SQLAlchemy statement it was compiled from (None for a message of several).
        self.invoked_statement = invoked

    def handle_dbapi_exception(self, e: BaseException) -> None:
        """Called by SQLAlchemy on a driver error, as on its own contexts; nothing to clean up."""


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
        sync = conn.sync_connection
        if sync is None or (options := sync.get_execution_options()).get(FAST_PATH) is False:
            result = await conn.execute(self.statement, params)
            return list(result.all()) if result.returns_rows else []
        args = _arguments(plan, params or {})
        raw = await _run(conn, sync, options, self, plan, args)
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
        if not params:
            return
        sync = conn.sync_connection
        if sync is None or (options := sync.get_execution_options()).get(FAST_PATH) is False:
            await conn.execute(self.statement, params[0] if len(params) == 1 else list(params))
        elif len(params) == 1:
            await _run(conn, sync, options, self, plan, _arguments(plan, params[0]))
        else:
            await _run(conn, sync, options, self, plan, [_arguments(plan, p) for p in params], many=True)

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

    def sql(self, dialect: Dialect) -> str:
        """The SQL text this statement sends on `dialect` (compiled on first use)."""
        return self._plan(dialect).sql


def _result_keys(statement: Executable) -> list[tuple[str, Any]]:
    """The result columns' keys and types, as `conn.execute` names them: only labels and named
    columns qualify (an unlabeled expression's key is an anonymous label chosen at compile time)."""
    columns = getattr(statement, "exported_columns", None)
    if columns is None:
        return []
    keys: list[tuple[str, Any]] = []
    for key, column in columns.items():
        name = getattr(column, "name", None)
        # (an anonymous label's name is a format string, never its key)
        if (
            not isinstance(column, Label | ColumnClause)
            or not isinstance(name, str)
            or key != name
            or "%(" in name
        ):
            raise BrokenInvariant(f"a prepared statement's result column {key!r} needs a label")
        keys.append((key, column.type))
    if len({k for k, _ in keys}) != len(keys):
        raise BrokenInvariant("a prepared statement's result columns need distinct names")
    return keys


def _compile(statement: Executable, dialect: Dialect) -> _Plan:
    compiled = cast(Any, statement).compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler) or not compiled.positional:
        raise BrokenInvariant(f"{dialect.name}: a prepared statement needs positional parameters")
    if compiled.insert_prefetch or compiled.update_prefetch or compiled.literal_execute_params:
        raise BrokenInvariant("a prepared statement cannot rely on Python-side defaults or literal execution")
    # The caller's parameters: binds given no value in the statement.
    required = {b.key for b in compiled.binds.values() if b.required}
    if any(b.key in required for b in compiled.post_compile_params):
        raise BrokenInvariant("a prepared statement cannot expand an IN list of the caller's values")
    # IN lists of constants (the active-rows rule's statuses, say) are rendered as one bind per
    # value, once; an IN list of the caller's values cannot be (refused above).
    expanded = compiled.construct_expanded_state({k: None for k in required})
    if expanded.positiontup is None:
        raise BrokenInvariant("a positional statement without its parameter order")
    params: list[tuple[str | None, Any, Callable[[Any], Any] | None]] = []
    for name in expanded.positiontup:
        bind = compiled.binds.get(name)
        proc: Any
        if bind is not None:
            proc = bind.type.dialect_impl(dialect).bind_processor(dialect)
        else:  # one value of a rendered IN list of constants
            proc = expanded.processors.get(name)
        if name in required:
            params.append((name, None, proc))
        else:
            value = expanded.parameters[name]
            params.append((None, proc(value) if proc else value, None))
    row: type[Row] | None = None
    result_processors: tuple[Callable[[Any], Any] | None, ...] = ()
    keys = _result_keys(statement)
    if keys:
        row = _row_class([k for k, _ in keys])
        result_processors = tuple(t.dialect_impl(dialect).result_processor(dialect, None) for _, t in keys)
    sql = expanded.statement
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
    conn: AsyncConnection,
    sync: Connection,
    options: Mapping[str, Any],
    prepared: Prepared,
    plan: _Plan,
    args: Any,
    *,
    many: bool = False,
) -> Sequence[Sequence[Any]]:
    # The pooled connection (reconnected the way SQLAlchemy does where it was invalidated).
    fairy = await conn.get_raw_connection() if sync.invalidated else sync.connection
    adapted: Any = fairy.dbapi_connection
    driver = adapted.driver_connection
    context = FastPathContext(sync, plan.sql, args, many, prepared.statement)
    sql, args = adapter.before_cursor_execute(sync, plan.sql, args, context, many)
    try:
        if plan.asyncpg:
            began = not adapter.transaction_begun(adapted)
            if began:
                await adapter.begin_transaction(adapted)
            try:
                if many:
                    await driver.executemany(sql, args)
                    raw = []
                else:
                    raw = await driver.fetch(sql, *args)
            except InvalidSQLStatementNameError:
                # Vanished prepared statements. Redone where nothing of the transaction ran before
                # this statement (it began it) and the adapter's BEGIN is a plain one.
                if not (began and adapter.plain_transaction(adapted)):
                    raise
                await forget_server_statements(fairy, adapted, driver)
                await driver.execute("ROLLBACK;DEALLOCATE ALL;BEGIN")
                if many:
                    await driver.executemany(sql, args)
                    raw = []
                else:
                    raw = await driver.fetch(sql, *args)
        else:
            inline = _inline_sqlite(options, driver)
            if inline is not None:
                if many:
                    inline.executemany(sql, args)
                    raw = []
                else:
                    raw = inline.execute(sql, args).fetchall()
            elif many:
                await driver.executemany(sql, args)
                raw = []
            else:
                raw = await driver.execute_fetchall(sql, args)
    except BaseException as exc:
        # Translated and re-raised as SQLAlchemy's own error. As in SQLAlchemy, a cancellation that
        # lands mid-statement (or mid-BEGIN) leaves the connection in an unknown state: it is
        # invalidated, never pooled again.
        await conn.run_sync(adapter.raise_as_sqlalchemy, adapted, exc, sql, args, context)
        raise  # not reached: raise_as_sqlalchemy always raises
    adapter.after_cursor_execute(sync, sql, args, context, many)
    return raw


def _inline_sqlite(options: Mapping[str, Any], driver: Any) -> sqlite3.Connection | None:
    """The SQLite connection itself, when a statement may run on the event loop's own thread.

    aiosqlite runs every call on the connection's worker thread and hands the result back through
    the loop: two thread switches, which cost several times what a small indexed statement does.
    Inside a write transaction that already holds SQLite's writer lock (`Database.write()` begins
    with BEGIN IMMEDIATE) a statement waits for nothing (WAL readers never block a writer), so it
    runs in place. BEGIN, which may wait for the lock, and COMMIT, which may checkpoint the WAL, stay
    on the worker thread; so do statements of read transactions. The unit awaits every call, so the
    connection is never used by both threads at once.
    """
    if not options.get(WRITE, False):
        return None
    raw = adapter.sqlite_connection(driver)
    return raw if raw.in_transaction else None


def begin_sqlite(conn: Connection, sql: str) -> None:
    """SQLite's BEGIN (or BEGIN IMMEDIATE), from SQLAlchemy's `begin` event (`Database`).

    With the fast path, straight on the driver (one hop to aiosqlite's thread, where it may wait for
    the writer lock) instead of SQLAlchemy's execution path, which cost more than the BEGIN; its
    events fire and a failure is translated and handled as on that path (a cancellation mid-BEGIN,
    which may still be waiting for the lock on aiosqlite's thread, invalidates the connection).
    Without, SQLAlchemy's documented recipe: `exec_driver_sql`."""
    if conn.get_execution_options().get(FAST_PATH) is False:
        conn.exec_driver_sql(sql)
        return
    fairy = conn.connection
    driver: Any = cast(Any, fairy.dbapi_connection).driver_connection
    context = FastPathContext(conn, sql, (), False)
    sent, params = adapter.before_cursor_execute(conn, sql, (), context, False)
    try:
        await_only(driver.execute(sent))
    except BaseException as exc:  # noqa: BLE001 - re-raised by SQLAlchemy as its own error
        adapter.raise_as_sqlalchemy(conn, fairy.dbapi_connection, exc, sent, params, context)
    adapter.after_cursor_execute(conn, sent, params, context, False)
