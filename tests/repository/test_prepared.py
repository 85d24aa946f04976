"""Prepared statements run on the driver connection but behave exactly like `conn.execute`: the same
values back (types processed), inside the caller's transaction, counted, and failing with SQLAlchemy's
own errors. The equivalence tests run with the fast path on and off (`TURNWISE_DB_FAST_PATH=0`: every
call is `conn.execute`), and hold both to the same results."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from sqlalchemy import Integer, bindparam, event, func, literal_column, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import Database, utcnow
from backend.db.fast_path import Prepared
from backend.db.prepared import begin_with
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.db.tables import task_status_summaries as Summaries
from backend.domain.errors import BrokenInvariant
from backend.domain.ids import new_id
from backend.domain.lifecycle import validate_questions
from backend.repository import asks, bundles, locks, message_fields, pending, summaries, tasks, turns
from tests.conftest import wipe


@pytest.fixture(params=[True, False], ids=["fast", "plain"])
async def either(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Database]:
    """The test's database with the fast path on, then off."""
    database = Database(database_url, fast_path=request.param)
    await wipe(database)
    try:
        yield database
    finally:
        await database.dispose()


async def seed_session(conn: AsyncConnection) -> tuple[str, str, str]:
    """A task, its session waiting on a two-question bundle in its first turn: (task, session, bundle)."""
    task = await tasks.create_task(conn, "t")
    session = await tasks.create_session(conn, task.id, is_primary=True, input_capable=True)
    turn = await turns.insert_turn(conn, session.id)
    pending_id = new_id()
    questions = validate_questions(
        [
            {"prompt": "a?", "options": [{"label": "x"}, {"label": "y"}]},
            {"prompt": "b?", "options": [{"label": "z"}, {"label": "w"}]},
        ],
        None,
    )
    bundle = asks.NewBundle(pending_id, questions, "why", "sig", "w", "i")
    await asks.insert_bundle(conn, bundle, session_id=session.id, turn_id=turn.id)
    await tasks.set_session_state(conn, session.id, "WAITING_FOR_INPUT")
    return task.id, session.id, pending_id


def _plain(rows: Sequence[Any]) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in rows]


# Every prepared statement of the hot path, with parameters that find rows; each must return what
# SQLAlchemy's own execution returns for the same statement.
def _cases(session_id: str, task_id: str, pending_id: str) -> list[tuple[Prepared, dict[str, Any]]]:
    return [
        (asks._ASK_CONTEXT, {"b_session": session_id, "b_signature": "nothing"}),
        (bundles._SESSION_OF_BUNDLE_P, {"b_pending_id": pending_id}),
        (bundles._BUNDLE_FACTS_ONE, {"b_pending_id": pending_id}),
        (pending._BY_TASK_ID_P, {"b_task_id": task_id}),
        (summaries._LOCK_ONE, {"b_task": task_id}),
    ]


async def test_reads_return_what_sqlalchemy_returns(either: Database) -> None:
    db = either
    async with db.write() as conn:
        task_id, session_id, pending_id = await seed_session(conn)
        await summaries.insert_missing(conn, {task_id: "clarification"})
    for prepared, params in _cases(session_id, task_id, pending_id):
        async with db.read() as conn:
            fast = await prepared.rows(conn, params)
            slow = (await conn.execute(prepared.statement, params)).all()
        assert fast, prepared.statement
        assert _plain(fast) == _plain(slow)
        assert [tuple(r) for r in fast] == [tuple(r) for r in slow]
    async with db.read() as conn:
        row = await asks._ASK_CONTEXT.first(conn, {"b_session": session_id, "b_signature": "x"})
    assert row is not None
    assert isinstance(row.created_at, dt.datetime)
    assert row.created_at.tzinfo is not None
    async with db.read() as conn:
        facts = await bundles._BUNDLE_FACTS_ONE.rows(conn, {"b_pending_id": pending_id})
    assert isinstance(facts[0].metadata, dict)
    assert facts[0].pending_id == pending_id


async def test_the_switch_changes_the_path_and_nothing_else(database_url: str) -> None:
    # The same statements on the same rows, fast path on and off: the same rows, values and types; off,
    # SQLAlchemy runs them (its own execution context), on, the fast path does.
    fast, plain = Database(database_url, fast_path=True), Database(database_url, fast_path=False)
    contexts: dict[bool, set[str]] = {True: set(), False: set()}
    try:
        await wipe(fast)
        async with fast.write() as conn:
            task_id, session_id, pending_id = await seed_session(conn)
            await summaries.insert_missing(conn, {task_id: "clarification"})
        for database in (fast, plain):

            def seen(
                _c: Any, _cur: Any, _s: str, _p: Any, context: Any, _m: bool, on: bool = database.fast_path
            ) -> None:
                contexts[on].add(type(context).__name__)

            event.listen(database.engine.sync_engine, "before_cursor_execute", seen)
        for prepared, params in _cases(session_id, task_id, pending_id):
            async with fast.read() as conn:
                on = await prepared.rows(conn, params)
            async with plain.read() as conn:
                off = await prepared.rows(conn, params)
            assert on, prepared.statement
            assert _plain(on) == _plain(off)
            assert [tuple(r) for r in on] == [tuple(r) for r in off]
            assert [[type(v) for v in r] for r in on] == [[type(v) for v in r] for r in off]
        now = utcnow()
        for database, state in ((fast, "RUNNING"), (plain, "WAITING_FOR_INPUT")):
            async with database.write() as conn:
                await tasks.set_session_state(conn, session_id, state, bump=True)
                revision = (await summaries.read_summaries(conn, [task_id]))[task_id].revision
                won = await summaries.compare_and_set(conn, {task_id: (revision, None)})
            async with database.read() as conn:
                stored = (
                    await conn.execute(select(S.c.state, S.c.updated_at).where(S.c.id == session_id))
                ).one()
            assert stored.state == state
            assert stored.updated_at >= now
            assert (won[task_id].revision, won[task_id].pending_action) == (revision + 1, None)
            assert won[task_id].updated_at.tzinfo is not None
        assert contexts[True] >= {"FastPathContext"}
        assert "FastPathContext" not in contexts[False]
        async with plain.write() as conn:
            assert not await begin_with(conn, locks.lock_one(session_id))  # nothing sent: off
    finally:
        await fast.dispose()
        await plain.dispose()


async def test_writes_store_what_sqlalchemy_would_and_return_processed_rows(either: Database) -> None:
    db = either
    async with db.write() as conn:
        task_id, session_id, _ = await seed_session(conn)
        await summaries.insert_missing(conn, {task_id: None})
    now = utcnow()
    async with db.write() as conn:
        won = await summaries.compare_and_set(conn, {task_id: (1, "clarification")})
        lost = await summaries.compare_and_set(conn, {task_id: (1, None)})
        await tasks.set_session_state(conn, session_id, "RUNNING", bump=True)
    assert lost == {}
    assert (won[task_id].revision, won[task_id].pending_action) == (2, "clarification")
    assert won[task_id].updated_at >= now
    assert won[task_id].updated_at.tzinfo is not None
    async with db.read() as conn:
        stored = (await conn.execute(select(Summaries).where(Summaries.c.task_id == task_id))).one()
        session = (await conn.execute(select(S).where(S.c.id == session_id))).one()
    assert stored.updated_at == won[task_id].updated_at
    assert (session.state, session.pending_seq) == ("RUNNING", 1)


async def test_a_prepared_statement_belongs_to_the_callers_transaction(either: Database) -> None:
    db = either
    async with db.write() as conn:
        _, session_id, _ = await seed_session(conn)

    async def fail_after_a_write() -> None:
        async with db.write() as conn:
            # The first statement of the transaction: on asyncpg it must start the transaction.
            await tasks.set_session_state(conn, session_id, "FAILED", bump=True)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        await fail_after_a_write()
    async with db.read() as conn:
        session = (await conn.execute(select(S).where(S.c.id == session_id))).one()
    assert (session.state, session.pending_seq) != ("FAILED", 1)


async def test_prepared_statements_are_counted(either: Database) -> None:
    db = either
    async with db.write() as conn:
        _, session_id, _ = await seed_session(conn)
    before = db.statements
    async with db.write():
        pass  # SQLite counts its BEGIN IMMEDIATE
    empty = db.statements - before
    before = db.statements
    async with db.write() as conn:
        await tasks.set_session_state(conn, session_id, "RUNNING")
        await tasks.bump_pending_seqs(conn, [session_id])
    assert db.statements - before == empty + 2


async def test_a_driver_error_is_sqlalchemys_error_and_the_transaction_rolls_back(either: Database) -> None:
    db = either
    async with db.write() as conn:
        _, session_id, pending_id = await seed_session(conn)
        row = (await conn.execute(select(M).where(M.c.session_id == session_id))).first()
    assert row is not None
    duplicate = {f"b_{k}": v for k, v in row._mapping.items()}

    async def write_a_duplicate() -> None:
        async with db.write() as conn:
            await tasks.set_session_state(conn, session_id, "FAILED")
            await asks._INSERT_ROW.many(conn, [duplicate])

    with pytest.raises(IntegrityError):
        await write_a_duplicate()
    async with db.read() as conn:
        state = (await conn.execute(select(S.c.state).where(S.c.id == session_id))).scalar_one()
        assert state != "FAILED"
        # The connection went back to the pool in a usable state.
        assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    assert pending_id


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "plain"])
async def test_a_lost_connection_invalidates_it_like_sqlalchemy_does(pg_url: str, fast_path: bool) -> None:
    db = Database(pg_url, pool_size=1, fast_path=fast_path)
    admin = Database(pg_url, pool_size=1)
    dead: list[int] = []
    try:

        async def lose_it_mid_unit() -> None:
            async with db.write() as conn:
                # Lost while checked out (a connection found closed at checkout is replaced first).
                dead.append((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
                async with admin.read() as other:
                    await other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead[0]})
                await asyncio.sleep(0.2)
                await tasks.bump_pending_seqs(conn, ["no-such-session"])

        with pytest.raises(DBAPIError) as failed:
            await lose_it_mid_unit()
        assert failed.value.connection_invalidated
        async with db.read() as conn:
            assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one() != dead[0]
    finally:
        await db.dispose()
        await admin.dispose()


def test_an_in_list_of_the_callers_values_is_refused(db: Database) -> None:
    refused = Prepared(update(S).where(S.c.id.in_(bindparam("ids", expanding=True))).values(state="x"))
    with pytest.raises(BrokenInvariant):
        refused.sql(db.engine.sync_engine.dialect)


async def test_a_statement_cancelled_mid_flight_never_returns_its_connection_to_the_pool(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1)
    holder = Database(pg_url, pool_size=1)
    try:
        async with holder.write() as held:
            await locks.lock_sessions(held, ["s"])

            async def wait_for_the_lock() -> None:
                async with db.write() as conn:
                    await locks.lock_sessions(conn, ["s"])

            blocked = asyncio.create_task(wait_for_the_lock())
            await asyncio.sleep(0.3)  # blocked on the lock, inside its transaction
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
        # Had the connection gone back to the pool mid-transaction, this would nest in it (a
        # savepoint) and its lock would outlive its commit.
        async with db.write() as conn:
            await locks.lock_sessions(conn, ["s"])
        async with holder.read() as conn:
            stuck = await conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
                )
            )
            assert stuck.scalar_one() == 0
    finally:
        await db.dispose()
        await holder.dispose()


async def test_every_way_of_locking_a_session_takes_the_same_lock(pg_url: str) -> None:
    # One session locked alone, among several, or found through its bundle: one key derivation, so
    # each way serializes with every other.
    db = Database(pg_url, pool_size=2)
    try:
        async with db.write() as conn:
            _, session_id, pending_id = await seed_session(conn)

        async def lock_alone(conn: AsyncConnection) -> None:
            await locks.lock_sessions(conn, [session_id])

        async def lock_among_others(conn: AsyncConnection) -> None:
            await locks.lock_sessions(conn, [session_id, "another-session"])

        async def lock_through_the_bundle(conn: AsyncConnection) -> None:
            found, locked = await bundles.lock_session_of_bundle(conn, pending_id)
            assert (found, locked) == (session_id, True)

        async def lock_holding_the_summary(conn: AsyncConnection) -> None:
            await summaries.lock_session_holding_summary(conn, session_id)

        async def lock_after_another_statement(conn: AsyncConnection) -> None:
            await conn.execute(text("SELECT 1"))  # the transaction has begun: no BEGIN message
            await locks.lock_sessions(conn, [session_id])

        ways = (
            lock_alone,
            lock_among_others,
            lock_through_the_bundle,
            lock_holding_the_summary,
            lock_after_another_statement,
        )
        for holding in ways:
            for waiting in ways:
                async with db.write() as held:
                    await holding(held)

                    async def contend(waiting: Any = waiting) -> None:
                        async with db.write() as conn:
                            await waiting(conn)

                    with pytest.raises(TimeoutError):
                        await asyncio.wait_for(contend(), 0.5)
    finally:
        await db.dispose()


# --- begin_with: the first statements of a transaction in BEGIN's own message ------------------

_DIVIDE = Prepared(select((literal_column("1") / bindparam("by", type_=Integer)).label("q")))


async def test_begin_with_sends_the_lock_with_begin_and_the_transaction_behaves_as_usual(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1, fast_path=True)
    try:
        async with db.write() as conn:
            _, session_id, _ = await seed_session(conn)
        before = db.statements
        async with db.write() as conn:
            assert await begin_with(conn, locks.lock_one(session_id))
            assert db.statements == before + 1  # BEGIN and the lock: one message, one statement
            # The lock is held, in a transaction SQLAlchemy and asyncpg both know about.
            held = await conn.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
            )
            assert held.scalar_one() == 1
            await tasks.set_session_state(conn, session_id, "RUNNING")
            assert not await begin_with(conn, locks.lock_one(session_id))  # begun: nothing sent
        async with db.read() as conn:
            state = (await conn.execute(select(S.c.state).where(S.c.id == session_id))).scalar_one()
            assert state == "RUNNING"  # committed

        async def fail_after_writing() -> None:
            async with db.write() as conn:
                assert await begin_with(conn, locks.lock_one(session_id))
                await tasks.set_session_state(conn, session_id, "FAILED")
                raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            await fail_after_writing()
        async with db.read() as conn:
            state = (await conn.execute(select(S.c.state).where(S.c.id == session_id))).scalar_one()
            assert state == "RUNNING"  # rolled back, lock released
            free = await conn.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            )
            assert free.scalar_one() == 0
    finally:
        await db.dispose()


async def test_begin_with_a_failing_statement_raises_sqlalchemys_error_and_rolls_back(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1, fast_path=True)
    try:
        with pytest.raises(DBAPIError, match="division by zero"):
            async with db.write() as conn:
                await begin_with(conn, locks.lock_one("s"), (_DIVIDE, {"by": 0}))
        async with db.write() as conn:  # the same connection, usable, in a new transaction
            await locks.lock_sessions(conn, ["s"])
            assert [r.q for r in await _DIVIDE.rows(conn, {"by": 1})] == [1]
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await db.dispose()


async def test_begin_with_prepares_each_statement_once_per_connection(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1, fast_path=True)
    name = locks._LOCK_ONE.server_name(db.engine.sync_engine.dialect)
    try:
        for _ in range(3):
            async with db.write() as conn:
                assert await begin_with(conn, locks.lock_one("s"))
                found = await conn.execute(
                    text("SELECT count(*) FROM pg_prepared_statements WHERE name = :n"), {"n": name}
                )
                assert found.scalar_one() == 1
    finally:
        await db.dispose()


async def test_after_a_failed_prepare_the_connection_runs_statements_as_usual(pg_url: str) -> None:
    # Whether a PREPARE in a failed message took is unknown (it outlives the failed transaction, or
    # never ran): the connection sends no more such messages, and its statements still run.
    db = Database(pg_url, pool_size=1, fast_path=True)
    dialect = db.engine.sync_engine.dialect
    try:
        with pytest.raises(DBAPIError, match="division by zero"):
            async with db.write() as conn:
                await begin_with(conn, (_DIVIDE, {"by": 0}))
        for _ in range(2):
            async with db.write() as conn:
                assert not await begin_with(conn, locks.lock_one("s"))
                await locks.lock_sessions(conn, ["s"])  # the usual way
                assert [r.q for r in await _DIVIDE.rows(conn, {"by": 1})] == [1]
                prepared = await conn.execute(text("SELECT name FROM pg_prepared_statements"))
                assert locks._LOCK_ONE.server_name(dialect) not in set(prepared.scalars())
    finally:
        await db.dispose()


@pytest.mark.parametrize("value", ["it's", "a b", "x" * 201, "é", 1.5, True, None])
async def test_begin_with_writes_no_value_it_cannot_write_safely(pg_url: str, value: Any) -> None:
    db = Database(pg_url, pool_size=1, fast_path=True)
    try:
        async with db.write() as conn:
            assert not await begin_with(conn, (_DIVIDE, {"by": value}))
            # Nothing was sent: the transaction has not begun.
            assert conn.sync_connection is not None
            assert not conn.sync_connection.connection.driver_connection.is_in_transaction()  # type: ignore[union-attr]
        async with db.write() as conn:  # and an unsafe id still locks, with bind parameters
            await locks.lock_sessions(conn, ["it's"])
    finally:
        await db.dispose()


async def test_begin_with_sends_nothing_on_sqlite(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    try:
        async with db.write() as conn:
            assert not await begin_with(conn, locks.lock_one("s"))
    finally:
        await db.dispose()


# --- the ask's context and insert in one statement (PostgreSQL) ----------------------------------


async def _ask(conn: AsyncConnection, session_id: str, signature: str) -> asks.AskContext:
    questions = validate_questions([{"prompt": "c?", "options": [{"label": "x"}, {"label": "y"}]}], None)
    bundle = asks.NewBundle(new_id(), questions, None, signature, "w2", "i")
    return await asks.ask_context_inserting(conn, bundle, session_id=session_id)


async def test_ask_context_inserting_writes_the_common_case_and_leaves_every_other_to_the_caller(
    pg_url: str,
) -> None:
    db = Database(pg_url)
    try:
        async with db.write() as conn:
            task_id, session_id, pending_id = await seed_session(conn)
            # An identical active bundle: nothing written, the bundle to re-attach to reported.
            same = await _ask(conn, session_id, "sig")
            assert (same.reusable, same.inserted) == (pending_id, None)
            # New questions in the live session's current turn: written, the session already waiting.
            new = await _ask(conn, session_id, "other")
            assert new.inserted is not None
            assert new.turn_id is not None
            (row,) = new.inserted
            assert (row.session_id, row.turn_id) == (session_id, new.turn_id)
            stored = (
                await conn.execute(select(M.c.turn_id, *message_fields.COLUMNS).where(M.c.id == row.id))
            ).one()
            assert stored.turn_id == new.turn_id
            assert message_fields.metadata_of(stored._mapping, where="row") == row.metadata
            # A session that is not waiting is set waiting (and its sequence bumped) with the insert.
            await tasks.set_session_state(conn, session_id, "RUNNING")
            seq = (await conn.execute(select(S.c.pending_seq).where(S.c.id == session_id))).scalar_one()
            running = await _ask(conn, session_id, "third")
            assert running.session.state == "RUNNING"
            assert running.inserted is not None
            state, bumped = (
                await conn.execute(select(S.c.state, S.c.pending_seq).where(S.c.id == session_id))
            ).one()
            assert (state, bumped) == ("WAITING_FOR_INPUT", seq + 1)
            # A session that has ended: nothing written.
            await tasks.set_session_state(conn, session_id, "COMPLETED")
            ended = await _ask(conn, session_id, "fourth")
            assert ended.inserted is None
            assert ended.session.state == "COMPLETED"
            # A session without a turn yet: nothing written (the caller opens one first).
            fresh = await tasks.create_session(conn, task_id, is_primary=False, input_capable=True)
            first = await _ask(conn, fresh.id, "fifth")
            assert (first.turn_id, first.inserted) == (None, None)
            count = await conn.execute(select(func.count()).select_from(M).where(M.c.session_id == fresh.id))
            assert count.scalar_one() == 0
    finally:
        await db.dispose()
