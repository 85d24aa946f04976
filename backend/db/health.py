"""Whether the database answers: outages as one error type, dead pooled connections replaced before
use, and the state behind `/readyz` and `turnwise_db_up`.

An outage is anything that says the server cannot be reached or went away: a refused or timed-out
connect, a connection closed under a statement, PostgreSQL shutting down or starting up (SQLSTATE
class 08, 57P01-57P03), a statement that got no reply within the statement timeout (a partition),
a pool that had no connection to give within its timeout. SQLAlchemy's `handle_error` event turns
the driver's forms of these into `DatabaseOutage` (an `OperationalError`, so code that fails
closed on `SQLAlchemyError` keeps doing so) and marks the connection disconnected, so it is closed
at once instead of being rolled back over a dead or frozen socket.

When a retry is safe (see docs/architecture.md, "When the database fails"): a pooled connection
whose socket the driver already saw closed is replaced at checkout, before anything of the unit
reached the server (`InvalidatePoolError`, a `DisconnectionError`: every connection older than it is
replaced too, at its own next checkout). Anything later is not retried here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine, ExceptionContext
from sqlalchemy.exc import DBAPIError, DisconnectionError, InvalidatePoolError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

log = logging.getLogger("turnwise.db")

# SQLSTATEs that mean "the server is not there for you": connection exceptions (class 08),
# admin/crash shutdown and "the database system is starting up / shutting down" (57P01-57P03),
# too many connections (53300, a restart's thundering herd).
_OUTAGE_STATES = ("08", "57P01", "57P02", "57P03", "53300")


class DatabaseOutage(OperationalError):
    """The database could not be reached or went away; nothing more is known of the statement."""


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state if isinstance(state, str) else None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__ or current.__context__
    return seen


def driver_outage(exc: BaseException) -> bool:
    """The driver's own forms of an outage (before SQLAlchemy wrapped them)."""
    if isinstance(exc, OSError | TimeoutError):
        return True  # refused, reset, unreachable; no reply within the connect or statement timeout
    state = _sqlstate(exc)
    if state is not None and state.startswith(_OUTAGE_STATES):
        return True
    name = type(exc).__name__
    # asyncpg's InterfaceError family for a connection it already knows is gone.
    return name in ("ConnectionDoesNotExistError", "ConnectionFailureError") or (
        name.endswith("InterfaceError") and "connection is closed" in str(exc)
    )


def is_outage(exc: BaseException) -> bool:
    """Does `exc` (or what it wraps) say the database could not be reached or went away? Only
    SQLAlchemy's errors count (a bare `OSError` may as well be the bus's): `Database` and the
    `handle_error` hook raise every outage as one of them. A connection replaced because its
    prepared statements vanished (SQLSTATE 26000, see `driver_adapter`) is not one: the server
    answered."""
    chain = _chain(exc)
    if any(_sqlstate(each) == "26000" for each in chain):
        return False
    for each in chain:
        if isinstance(each, DatabaseOutage | DisconnectionError | PoolTimeout):
            return True
        if isinstance(each, DBAPIError) and (
            each.connection_invalidated or (each.orig is not None and driver_outage(each.orig))
        ):
            return True
    return False


class Health:
    """Up or down, as the last connection attempt or statement found it; counts what failed."""

    def __init__(self) -> None:
        self.up = True
        self.failures = 0
        self.down_since: float | None = None
        # Told of every change of state (up: True/False), and of every failure counted.
        self.listeners: list[Callable[[bool], None]] = []
        self.failure_listeners: list[Callable[[], None]] = []

    def _count(self) -> None:
        self.failures += 1
        for listener in self.failure_listeners:
            listener()

    def lost(self) -> None:
        """A connection found dead and replaced: counted, but the server may well be up (a restart)."""
        self._count()

    def failed(self, exc: BaseException) -> None:
        self._count()
        if self.up:
            self.up = False
            self.down_since = time.monotonic()
            log.warning(
                "database unreachable",
                extra={"event": "db.down", "error": f"{type(exc).__name__}: {exc}"[:300]},
            )
            self._tell(False)

    def answered(self) -> None:
        if not self.up:
            self.up = True
            took = time.monotonic() - (self.down_since or time.monotonic())
            self.down_since = None
            log.info("database reachable again", extra={"event": "db.up", "seconds": round(took, 3)})
            self._tell(True)

    def _tell(self, up: bool) -> None:
        for listener in self.listeners:
            try:
                listener(up)
            except Exception:
                log.exception("database health listener failed")


def install(engine: Engine, health: Health, *, asyncpg: bool) -> None:
    """Outages become `DatabaseOutage`; a new connection marks the database up; on asyncpg a pooled
    connection whose socket is already closed is replaced at checkout (no round trip: the driver
    saw the server close it, as every backend does on a restart or a crash)."""

    @event.listens_for(engine, "handle_error")
    def _outage(context: ExceptionContext) -> BaseException | None:
        original = context.original_exception
        if isinstance(original, DatabaseOutage) or not driver_outage(original):
            return None
        # Closed at once rather than rolled back over a dead or frozen socket, and never pooled again.
        context.is_disconnect = True
        return DatabaseOutage(context.statement, context.parameters, original, connection_invalidated=True)

    @event.listens_for(engine.pool, "connect")
    def _connected(_dbapi_connection: Any, _record: Any) -> None:
        health.answered()

    if not asyncpg:
        return

    @event.listens_for(engine.pool, "checkout")
    def _alive(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if dbapi_connection.driver_connection.is_closed():
            health.lost()
            raise InvalidatePoolError("pooled connection closed by the server")
