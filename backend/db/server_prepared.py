"""The statements a PostgreSQL connection holds prepared on the server, and what is done when they vanish.

Two kinds are held: those asyncpg prepares for its own statement cache (and SQLAlchemy's adapter
remembers), and those `begin_with` (`backend/db/prepared.py`) prepares by name, which
are remembered in the connection's pool record (`SERVER_PREPARED`).

They vanish (SQLSTATE 26000) after `DISCARD ALL` / `DEALLOCATE ALL`, or when a pooler moves the
session. Where the failing statement was the first of its transaction (nothing of the unit has
run), the caller drops and forgets them all (`forget_server_statements`: ours, asyncpg's cache,
SQLAlchemy's adapter cache) and redoes the statement, transparently; anywhere else
`install_repair`'s `handle_error` listener replaces the connection, so that statement fails once and
the next succeeds.
"""

from __future__ import annotations

import logging
from typing import Any

from asyncpg.exceptions import InvalidSQLStatementNameError  # type: ignore[import-untyped]
from sqlalchemy import event
from sqlalchemy.engine import Engine, ExceptionContext

from backend.db import driver_adapter as adapter

log = logging.getLogger("turnwise.db")

# Per connection (in its pool record's `info`): the driver connection and the names `begin_with`
# prepared on it, or None once a message that prepared one failed (whether it took is unknown; the
# connection then runs its statements the usual way).
SERVER_PREPARED = "turnwise_server_prepared"

_VANISHED = "26000"  # invalid_sql_statement_name: a prepared statement this connection used is gone


async def forget_server_statements(fairy: Any, adapted: Any, driver: Any) -> None:
    """The connection's server-prepared statements are gone (or about to be dropped): forget them
    everywhere they are remembered, so each is prepared anew on its next use."""
    log.warning(
        "server-prepared statements vanished (SQLSTATE 26000); dropped and prepared anew",
        extra={"event": "db.prepared_vanished"},
    )
    await driver.reload_schema_state()  # asyncpg's statement cache (and its type cache)
    adapter.forget_prepared_statements(adapted)
    known = fairy.info.get(SERVER_PREPARED)
    if known is not None and known[0] is driver:
        fairy.info[SERVER_PREPARED] = (driver, set())


def _vanished(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, InvalidSQLStatementNameError) or getattr(exc, "sqlstate", None) == _VANISHED:
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


def install_repair(engine: Engine) -> None:
    """PostgreSQL: a statement that failed because a prepared statement of its connection vanished
    (SQLSTATE 26000: `DISCARD ALL`, `DEALLOCATE`, a pooler that moved the session) and could not be
    redone replaces that connection (only that one): it fails once, with this said in its message,
    and the next unit gets a new connection whose statements are prepared anew. Any path (the fast
    path, SQLAlchemy's own, the fast path switched off)."""

    @event.listens_for(engine, "handle_error")
    def _replace(context: ExceptionContext) -> None:
        if not _vanished(context.original_exception):
            return
        context.is_disconnect = True
        context.invalidate_pool_on_disconnect = False
        if context.sqlalchemy_exception is not None:
            context.sqlalchemy_exception.add_detail(
                "turnwise: a prepared statement of this connection vanished (SQLSTATE 26000: DISCARD "
                "ALL, DEALLOCATE or a pooler); the connection is replaced, so a retry runs on a new one"
            )
        log.warning(
            "connection replaced: its prepared statements vanished", extra={"event": "db.prepared_vanished"}
        )
