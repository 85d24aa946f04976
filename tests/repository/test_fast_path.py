"""The fast path as SQLAlchemy's instrumentation sees it (paired cursor events, the `sqlalchemy.engine`
log), its repair of server-prepared statements that vanished (SQLSTATE 26000), pooler mode (PgBouncer
in transaction pooling: nothing prepared by name), and the settings that switch them."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Integer, bindparam, event, literal_column, select, table, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.config import Settings
from backend.db.engine import Database, utcnow
from backend.db.fast_path import FastPathContext, Prepared
from backend.db.prepared import begin_with
from backend.db.tables import task_sessions as S
from backend.domain.lifecycle import Answered
from backend.repository import locks
from backend.services.pending.core import trusted
from tests.conftest import wipe
from tests.lifecycle.support import Agent, new_session, running, yes
from tests.repository.test_prepared import seed_session

_DIVIDE = Prepared(select((literal_column("1") / bindparam("by", type_=Integer)).label("q")))
_TOUCH = Prepared(
    update(S)
    .where(S.c.id == bindparam("b_session", type_=S.c.id.type))
    .values(updated_at=bindparam("b_now", type_=S.c.updated_at.type))
)
_BROKEN = Prepared(select(literal_column("1").label("one")).select_from(table("no_such_table")))
_STATE = Prepared(select(S.c.state).where(S.c.id == bindparam("b_session", type_=S.c.id.type)))


@pytest.fixture
async def fast(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url, pool_size=1, fast_path=True)
    await wipe(database)
    try:
        yield database
    finally:
        await database.dispose()


class Cursor:
    """Every before_cursor_execute and after_cursor_execute of an engine, with its arguments."""

    def __init__(self) -> None:
        self.before: list[tuple[Any, ...]] = []
        self.after: list[tuple[Any, ...]] = []

    def on_before(self, *args: Any) -> None:
        self.before.append(args)

    def on_after(self, *args: Any) -> None:
        self.after.append(args)

    def clear(self) -> None:
        self.before.clear()
        self.after.clear()

    def assert_paired(self) -> None:
        """One after per before, in order, with the same arguments (the same context object)."""
        assert len(self.after) == len(self.before)
        for before, after in zip(self.before, self.after, strict=True):
            assert len(before) == len(after) == 6  # conn, cursor, statement, parameters, context, executemany
            assert before[0] is after[0]
            assert before[2:4] == after[2:4]
            assert before[4] is after[4]
            assert before[5] == after[5]


@contextmanager
def cursor_events(db: Database) -> Iterator[Cursor]:
    seen = Cursor()
    engine = db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen.on_before)
    event.listen(engine, "after_cursor_execute", seen.on_after)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", seen.on_before)
        event.remove(engine, "after_cursor_execute", seen.on_after)


# --- instrumentation sees every statement of the fast path ---------------------------------------


async def test_each_fast_path_call_fires_after_cursor_execute_once_per_before(fast: Database) -> None:
    async with fast.write() as conn:
        _, session_id, _ = await seed_session(conn)
    with cursor_events(fast) as seen:
        # SQLite's BEGIN IMMEDIATE (the BEGIN hook), then rows, many of one, many of several.
        async with fast.write() as conn:
            assert [r.q for r in await _DIVIDE.rows(conn, {"by": 1})] == [1]
            await _TOUCH.many(conn, [{"b_session": session_id, "b_now": utcnow()}])
            await _TOUCH.many(conn, [{"b_session": session_id, "b_now": utcnow()}] * 2)
        seen.assert_paired()
        statements = [b[2] for b in seen.before]
        contexts = [b[4] for b in seen.before]
        assert all(isinstance(c, FastPathContext) for c in contexts)
        assert len({id(c) for c in contexts}) == len(contexts)  # one context per statement
        assert [b[5] for b in seen.before][-3:] == [False, False, True]  # executemany as SQLAlchemy passes it
        assert isinstance(seen.before[-1][3][0], list)  # a list of parameter sets
        if fast.is_sqlite:
            assert statements[0] == "BEGIN IMMEDIATE"
            assert len(statements) == 4
        else:
            assert len(statements) == 3
            # A unit beginning with its lock (one message).
            seen.clear()
            async with fast.write() as conn:
                assert await begin_with(conn, locks.lock_one(session_id))
            seen.assert_paired()
            assert seen.before[0][2].startswith("BEGIN;")
            assert all(isinstance(b[4], FastPathContext) for b in seen.before)


async def test_a_failing_statement_fires_handle_error_with_its_context_and_no_after(fast: Database) -> None:
    errors: list[Any] = []

    def on_error(context: Any) -> None:
        errors.append(context.execution_context)

    event.listen(fast.engine.sync_engine, "handle_error", on_error)
    with cursor_events(fast) as seen, pytest.raises(DBAPIError):
        async with fast.read() as conn:
            await _BROKEN.rows(conn)
    # SQLAlchemy's own pattern: before, then handle_error instead of after.
    failed = [b for b in seen.before if "no_such_table" in b[2]]
    assert isinstance(failed[0][4], FastPathContext)
    assert len(failed) == 1
    assert not [a for a in seen.after if a[4] is failed[0][4]]
    assert errors == [failed[0][4]]


async def test_a_retval_listener_changes_what_the_fast_path_sends(fast: Database) -> None:
    # As on SQLAlchemy's path: a `retval=True` listener (a SQL commenter, say) may rewrite the statement.
    def comment(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> tuple[str, Any]:
        return statement + " -- traced", parameters

    event.listen(fast.engine.sync_engine, "before_cursor_execute", comment, retval=True)
    with cursor_events(fast) as seen:
        async with fast.read() as conn:
            assert [r.q for r in await _DIVIDE.rows(conn, {"by": 1})] == [1]
    assert seen.after[-1][2].endswith(" -- traced")


async def test_echo_logs_the_fast_paths_statements(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # `echo=True` (and logging configured for `sqlalchemy.engine`) see the fast path's statements too.
    db = Database(database_url, pool_size=1, echo=True, fast_path=True)
    try:
        await wipe(db)
        async with db.write() as conn:
            _, session_id, _ = await seed_session(conn)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="sqlalchemy.engine"):
            async with db.write() as conn:
                await locks.lock_sessions(conn, [session_id])
                await _DIVIDE.rows(conn, {"by": 1})
        logged = [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy.engine")]
        assert any(m == _DIVIDE.sql(db.engine.sync_engine.dialect) for m in logged)
        assert any(m.startswith("[turnwise fast path] [1]") for m in logged)
        if db.is_sqlite:
            assert "BEGIN IMMEDIATE" in logged
        else:
            assert any(
                m.startswith("BEGIN;EXECUTE turnwise_") or m.startswith("BEGIN;PREPARE") for m in logged
            )
    finally:
        await db.dispose()


async def test_the_switch_off_runs_sqlites_begin_through_sqlalchemy(sqlite_url: str) -> None:
    db = Database(sqlite_url, fast_path=False)
    try:
        await wipe(db)
        with cursor_events(db) as seen:
            async with db.write() as conn:
                _, session_id, _ = await seed_session(conn)
            async with db.read() as conn:
                assert (await _STATE.rows(conn, {"b_session": session_id}))[0].state == "WAITING_FOR_INPUT"
        seen.assert_paired()
        assert [b[2] for b in seen.before if b[2].startswith("BEGIN")] == ["BEGIN IMMEDIATE", "BEGIN"]
        assert not any(isinstance(b[4], FastPathContext) for b in seen.before)
    finally:
        await db.dispose()


# --- server-prepared statements that vanished (SQLSTATE 26000) ----------------------------------


async def _vanish(db: Database, how: str) -> int:
    """Drop every server-prepared statement of the pooled connection (`DISCARD ALL` must run outside a
    transaction: nothing has been sent on this connection yet). Its backend's pid."""
    async with db.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None
        await driver.execute(how)
        pid: int = await driver.fetchval("SELECT pg_backend_pid()")
        return pid


async def _warm(db: Database, session_id: str) -> None:
    """Statements of every kind prepared on the connection: begin_with's, asyncpg's, SQLAlchemy's."""
    for _ in range(2):
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            await _STATE.rows(conn, {"b_session": session_id})
            await conn.execute(select(S.c.id).where(S.c.id == session_id))
        async with db.read() as conn:
            await _STATE.rows(conn, {"b_session": session_id})
            await conn.execute(select(S.c.state).where(S.c.id == session_id))


async def _backend(conn: AsyncConnection) -> int:
    return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _unit(conn: AsyncConnection, session_id: str) -> None:
    """A unit's usual mix after its first statement: prepared, SQLAlchemy's, prepared again."""
    assert (await _STATE.rows(conn, {"b_session": session_id}))[0].state == "WAITING_FOR_INPUT"
    assert (await conn.execute(select(S.c.id).where(S.c.id == session_id))).scalar_one() == session_id
    await conn.execute(select(S.c.state).where(S.c.id == session_id))
    await _TOUCH.many(conn, [{"b_session": session_id, "b_now": utcnow()}])


@pytest.mark.parametrize("how", ["DISCARD ALL", "DEALLOCATE ALL"])
async def test_vanished_statements_are_prepared_anew_where_the_unit_starts_with_the_fast_path(
    pg_url: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(pg_url, pool_size=1, fast_path=True)
    try:
        await wipe(db)
        async with db.write() as conn:
            _, session_id, _ = await seed_session(conn)
        # A write unit beginning with its lock in BEGIN's message, a read beginning with a prepared
        # statement: each redone transparently on the same connection.
        for first in ("begin_with", "rows"):
            await _warm(db, session_id)
            pid = await _vanish(db, how)
            caplog.clear()
            if first == "begin_with":
                async with db.write() as conn:
                    await locks.lock_sessions(conn, [session_id])
                    await _unit(conn, session_id)
                    assert await _backend(conn) == pid
            else:
                async with db.read() as conn:
                    await _unit(conn, session_id)
                    assert await _backend(conn) == pid
            repaired = [r for r in caplog.records if getattr(r, "event", None) == "db.prepared_vanished"]
            assert [r.getMessage() for r in repaired] == [
                "server-prepared statements vanished (SQLSTATE 26000); dropped and prepared anew"
            ], first
    finally:
        await db.dispose()


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "plain"])
async def test_vanished_statements_fail_one_unit_at_most_and_the_connection_is_replaced(
    pg_url: str, fast_path: bool
) -> None:
    # Where the failing statement cannot be redone (SQLAlchemy's own path, or the fast path after
    # other statements of its transaction) that unit fails, saying why, and the next one succeeds.
    db = Database(pg_url, pool_size=1, fast_path=fast_path)
    try:
        await wipe(db)
        async with db.write() as conn:
            _, session_id, _ = await seed_session(conn)
        for first_is_sqlalchemys in (True, False):
            await _warm(db, session_id)
            pid = await _vanish(db, "DISCARD ALL")

            async def read(first_is_sqlalchemys: bool = first_is_sqlalchemys) -> None:
                async with db.read() as conn:
                    if first_is_sqlalchemys:
                        await conn.execute(select(S.c.state).where(S.c.id == session_id))
                    else:
                        await conn.execute(text("SELECT 2 AS never_prepared_before"))
                    await _STATE.rows(conn, {"b_session": session_id})

            with pytest.raises(DBAPIError, match="SQLSTATE 26000") as failed:
                await read()
            assert failed.value.connection_invalidated
            for _ in range(3):
                async with db.write() as conn:
                    await locks.lock_sessions(conn, [session_id])
                    await _unit(conn, session_id)
                    assert await _backend(conn) != pid
    finally:
        await db.dispose()


# --- pooler mode: PgBouncer in transaction pooling -------------------------------------------------


async def test_pooler_mode_prepares_nothing_by_name_and_works(pg_url: str) -> None:
    # Against PostgreSQL directly: the settings PgBouncer needs (nothing may be prepared by name, since
    # consecutive transactions may run on different server connections), and everything still works.
    db = Database(pg_url, pool_size=2, pooler="pgbouncer")
    assert db.pooler == "pgbouncer"
    sent: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        await wipe(db)
        async with db.write() as conn:
            _, session_id, _ = await seed_session(conn)
            assert not await begin_with(conn, locks.lock_one(session_id))
        async with running(db, heartbeat_seconds=3600.0) as svc:
            await svc.waiters.stop()
            _, session = await new_session(svc)
            for _ in range(2):
                agent = await Agent.ask(svc, session)
                waiting = agent.wait()
                await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
                assert isinstance(await agent.outcome(), Answered)
                assert waiting.done()
                await agent.close()
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            await _unit(conn, session_id)
            # Nothing named on the server: not ours, not asyncpg's cache, not SQLAlchemy's adapter's.
            named = await conn.execute(text("SELECT name FROM pg_prepared_statements"))
            assert list(named.scalars()) == []
        assert sent
        assert not [s for s in sent if re.search(r"\b(PREPARE|EXECUTE|DEALLOCATE)\b", s)]
    finally:
        await db.dispose()


def test_only_transaction_scoped_locks_and_state_are_used() -> None:
    # Behind PgBouncer's transaction pooling a session-level lock, setting, LISTEN or temporary table
    # would stay on a server connection other clients get next. The bus's LISTEN (bus/postgres.py) is
    # on its own connection, TURNWISE_BROADCAST_URL, which must reach PostgreSQL directly.
    # (SQL keywords as the code writes them, upper case; functions as PostgreSQL names them)
    session_level = re.compile(
        r"pg_(try_)?advisory_(lock|unlock)|\bLISTEN\b|\bSET\s+(SESSION\s+)?[a-z_]+\s*(=|TO)\b|"
        r"CREATE\s+TEMP|WITH\s+HOLD|session_replication_role|set_config\("
    )
    root = Path(__file__).resolve().parents[2] / "backend"
    found = [
        f"{path.relative_to(root)}: {match.group(0)}"
        for path in root.rglob("*.py")
        if path.relative_to(root).as_posix() != "bus/postgres.py" and "migrations" not in path.parts
        for match in session_level.finditer(path.read_text())
    ]
    assert found == []


# --- the settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "on"), [(None, True), ("", True), ("1", True), ("0", False), ("false", False), ("No", False)]
)
def test_the_fast_path_switch(monkeypatch: pytest.MonkeyPatch, raw: str | None, on: bool) -> None:
    if raw is None:
        monkeypatch.delenv("TURNWISE_DB_FAST_PATH", raising=False)
    else:
        monkeypatch.setenv("TURNWISE_DB_FAST_PATH", raw)
    assert Settings.from_env().db_fast_path is on
    db = Database("sqlite+aiosqlite:///:memory:")
    assert db.fast_path is on


def test_the_pooler_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNWISE_DB_POOLER", "PgBouncer")
    assert Settings.from_env().db_pooler == "pgbouncer"
    monkeypatch.setenv("TURNWISE_DB_POOLER", "")
    assert Settings.from_env().db_pooler is None
    monkeypatch.setenv("TURNWISE_DB_POOLER", "pgpool")
    with pytest.raises(ValueError, match="TURNWISE_DB_POOLER must be one of pgbouncer"):
        Settings.from_env()
    problem = Settings(database_url="sqlite+aiosqlite:///x.db", db_pooler="pgbouncer").scale_out_problem()
    assert problem is not None
    assert "needs a postgresql+asyncpg://" in problem
    with pytest.raises(ValueError, match="TURNWISE_DB_POOLER must be one of pgbouncer"):
        Settings(db_pooler="pgpool")
    with pytest.raises(ValueError, match="needs PostgreSQL"):
        Database("sqlite+aiosqlite:///:memory:", pooler="pgbouncer")
