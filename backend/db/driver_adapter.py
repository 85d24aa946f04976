"""Every private or undocumented name of SQLAlchemy, its asyncio adapters and aiosqlite that the
database fast path (`backend/db/fast_path.py`, `prepared.py`, `server_prepared.py`, the SQLite BEGIN
hook) still relies on: here, and nowhere else.

Checked against (`CHECKED`): SQLAlchemy 2.1.9, asyncpg 0.32.0, aiosqlite 0.22.1. The canary
(`tests/repository/test_driver_adapter.py`) checks that each name of `RELIED_ON` still exists with
the shape used here, exercises it on live connections, and fails while an installed version differs
from `CHECKED`, naming what to re-check. asyncpg itself is used through its public `Connection`
methods only (`fetch`, `execute`, `executemany`, `is_in_transaction`, `reload_schema_state`).

What the fast path reaches through public API instead: the pooled connection
(`Connection.connection`, `AsyncConnection.get_raw_connection()`), the driver connection
(`PoolProxiedConnection.driver_connection`), per-connection state (`PoolProxiedConnection.info`),
the switch and the pooler mode (engine execution options), the compiled form
(`construct_params`, `construct_expanded_state`, `positiontup`, `binds`, the statement's
`exported_columns`, `TypeEngine.dialect_impl().bind_processor()/result_processor()`), the repair
of vanished prepared statements (the `handle_error` event), SQLite's BEGIN with the switch off
(`exec_driver_sql`, SQLAlchemy's documented recipe).

The names that remain, and why there is no public way:

- `Connection._handle_dbapi_exception(e, statement, parameters, cursor, context)`: raise a driver
  error exactly as SQLAlchemy's execution does (the same `DBAPIError` subclass, the `handle_error`
  event, a disconnect or a cancellation invalidating the connection and the pool). No public call
  enters that path.
- `Connection.dispatch` (undocumented attribute, not underscored): fire the documented
  `before_cursor_execute` / `after_cursor_execute` events for statements SQLAlchemy did not run.
  Events have no public "fire".
- `Engine.logger` (undocumented attribute): the logger `echo=True` turns on (SQLAlchemy wraps
  `sqlalchemy.engine.Engine` in its own echo-aware logger, so logging to the named logger would be
  filtered out under `echo=True`).
- `AsyncAdapt_dbapi_connection._handle_exception(error)` (asyncpg and aiosqlite adapters): the
  adapter's translation of a driver exception into its DBAPI exception classes (asyncpg's
  `UniqueViolationError` into `IntegrityError`, say).
- `AsyncAdapt_asyncpg_connection._transaction` and `._start_transaction()`: SQLAlchemy begins the
  asyncpg transaction lazily, on the adapter's first cursor statement; a statement run on the driver
  must begin it the same way (read: begun yet?; call: begin it), and `begin_with`, whose message
  begins it, must register it so SQLAlchemy's commit and rollback end it. There is no public
  "begin now" on the adapter.
- `AsyncAdapt_asyncpg_connection.isolation_level`, `.readonly`, `.deferrable` (undocumented, not
  underscored): `begin_with` sends a plain BEGIN, so only where none of them is set.
- `AsyncAdapt_asyncpg_connection._prepared_statement_cache`: the adapter's cache of server-prepared
  statements, emptied when they vanished (SQLSTATE 26000) and the statement is redone.
- `aiosqlite.Connection._conn`: the `sqlite3` connection, for statements run in place (inside a
  write unit holding SQLite's writer lock) instead of on aiosqlite's thread.
"""

from __future__ import annotations

import logging
import reprlib
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, NoReturn

# The library versions the names below were read and checked against.
CHECKED = {"sqlalchemy": "2.1.9", "asyncpg": "0.32.0", "aiosqlite": "0.22.1"}


@dataclass(frozen=True, slots=True)
class Reliance:
    """One name relied on: `owner` ("module:Class"), the attribute, what it must be (`method`,
    `coroutine`, `attribute`, `property`), and for a method the leading parameter names."""

    library: str
    owner: str
    name: str
    kind: str
    parameters: tuple[str, ...] = ()


RELIED_ON: tuple[Reliance, ...] = (
    Reliance(
        "sqlalchemy",
        "sqlalchemy.engine.base:Connection",
        "_handle_dbapi_exception",
        "method",
        ("self", "e", "statement", "parameters", "cursor", "context"),
    ),
    Reliance("sqlalchemy", "sqlalchemy.engine.base:Connection", "dispatch", "attribute"),
    Reliance("sqlalchemy", "sqlalchemy.engine.base:Engine", "logger", "attribute"),
    Reliance(
        "sqlalchemy",
        "sqlalchemy.connectors.asyncio:AsyncAdapt_dbapi_connection",
        "_handle_exception",
        "method",
        ("self", "error"),
    ),
    Reliance(
        "sqlalchemy",
        "sqlalchemy.dialects.postgresql.asyncpg:AsyncAdapt_asyncpg_connection",
        "_transaction",
        "attribute",
    ),
    Reliance(
        "sqlalchemy",
        "sqlalchemy.dialects.postgresql.asyncpg:AsyncAdapt_asyncpg_connection",
        "_start_transaction",
        "coroutine",
        ("self",),
    ),
    Reliance(
        "sqlalchemy",
        "sqlalchemy.dialects.postgresql.asyncpg:AsyncAdapt_asyncpg_connection",
        "isolation_level",
        "attribute",
    ),
    Reliance(
        "sqlalchemy",
        "sqlalchemy.dialects.postgresql.asyncpg:AsyncAdapt_asyncpg_connection",
        "readonly",
        "attribute",
    ),
    Reliance(
        "sqlalchemy",
        "sqlalchemy.dialects.postgresql.asyncpg:AsyncAdapt_asyncpg_connection",
        "deferrable",
        "attribute",
    ),
    Reliance(
        "sqlalchemy",
        "sqlalchemy.dialects.postgresql.asyncpg:AsyncAdapt_asyncpg_connection",
        "_prepared_statement_cache",
        "attribute",
    ),
    Reliance("aiosqlite", "aiosqlite.core:Connection", "_conn", "property"),
)


# Public behaviour relied on beyond the names above, re-checked with them after an upgrade (the canary
# exercises each).
BEHAVIOURS: dict[str, tuple[str, ...]] = {
    "asyncpg": (
        "connect(statement_cache_size=0): fetch() and prepare() use the unnamed statement",
        "Connection.prepare(name=''): the unnamed statement (what pooler mode's name function gives)",
        "Connection.reload_schema_state(): empties the statement cache (the 26000 repair)",
        "exceptions.InvalidSQLStatementNameError: SQLSTATE 26000",
        "Connection.get_server_pid(): the process id of the connect's BackendKeyData (engine's pooler check)",
    ),
    "sqlalchemy": (
        "the asyncpg adapter's prepared_statement_name_func / prepared_statement_cache_size connect args",
        "ExceptionContext.is_disconnect / invalidate_pool_on_disconnect set by a handle_error listener",
    ),
}


def installed_versions() -> dict[str, str]:
    return {name: version(name) for name in CHECKED}


# --- SQLAlchemy's Connection --------------------------------------------------------------------


def raise_as_sqlalchemy(
    sync: Any, adapted: Any, exc: BaseException, statement: str, parameters: Any, context: Any
) -> NoReturn:
    """Raise `exc` (the driver's, from a statement run on `adapted`'s driver connection) the way
    SQLAlchemy's own execution would. Run in SQLAlchemy's greenlet (`AsyncConnection.run_sync`, or
    an event hook)."""
    # SQLAlchemy reads the exception being handled (sys.exc_info()): raise it here to handle it.
    if not isinstance(exc, Exception):
        try:
            raise exc
        except BaseException as exiting:  # noqa: BLE001 - handed to SQLAlchemy, which re-raises it
            # A cancellation mid-statement: SQLAlchemy invalidates the connection, never pooling it.
            sync._handle_dbapi_exception(exiting, statement, parameters, None, context)
    try:
        adapted._handle_exception(exc)  # raises the adapter's DBAPI error
    except Exception as dbapi_error:  # noqa: BLE001 - wrapped by SQLAlchemy (the pool invalidated on a disconnect)
        sync._handle_dbapi_exception(dbapi_error, statement, parameters, None, context)
    raise AssertionError("not reached: _handle_dbapi_exception always raises")  # pragma: no cover


def before_cursor_execute(
    sync: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> tuple[str, Any]:
    """Fire `before_cursor_execute` as SQLAlchemy does: each listener in turn, the statement and
    parameters as the previous one returned them (`retval=True` listeners may change them); then
    log the statement where SQLAlchemy would log its own (`echo=True`, or `sqlalchemy.engine` at
    INFO)."""
    for fn in sync.dispatch.before_cursor_execute:
        statement, parameters = fn(sync, None, statement, parameters, context, executemany)
    logger = sync.engine.logger
    if logger.isEnabledFor(logging.INFO):
        logger.info(statement)
        if sync.engine.hide_parameters:
            logger.info("[turnwise fast path] [SQL parameters hidden due to hide_parameters=True]")
        else:
            logger.info("[turnwise fast path] %s", reprlib.repr(parameters))
    return statement, parameters


def after_cursor_execute(sync: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
    """Fire `after_cursor_execute` (where anything listens: the test costs a third of the call)."""
    listeners = sync.dispatch.after_cursor_execute
    if listeners:
        listeners(sync, None, statement, parameters, context, executemany)


# --- SQLAlchemy's asyncpg adapter ----------------------------------------------------------------


def transaction_begun(adapted: Any) -> bool:
    """Has SQLAlchemy's transaction on this asyncpg connection reached the server yet?"""
    return adapted._transaction is not None


def begin_transaction(adapted: Any) -> Awaitable[None]:
    """Begin it as the adapter does on its first cursor statement (isolation level, access mode)."""
    start: Callable[[], Awaitable[None]] = adapted._start_transaction
    return start()


def register_transaction(adapted: Any, transaction: Any) -> None:
    """Make `transaction` (start/commit/rollback coroutines) the adapter's transaction: what
    SQLAlchemy's commit and rollback, and the pool's reset, then end."""
    adapted._transaction = transaction


def plain_transaction(adapted: Any) -> bool:
    """Would the adapter begin with a plain BEGIN (no isolation level or access mode of its own)?"""
    return adapted.isolation_level is None and not adapted.readonly and not adapted.deferrable


def forget_prepared_statements(adapted: Any) -> None:
    """Empty the adapter's cache of statements prepared on the server (they are gone)."""
    cache = adapted._prepared_statement_cache
    if cache is not None:
        cache.clear()


# --- aiosqlite -----------------------------------------------------------------------------------


def sqlite_connection(driver: Any) -> sqlite3.Connection:
    """The `sqlite3` connection under an aiosqlite connection."""
    raw: sqlite3.Connection = driver._conn
    return raw
