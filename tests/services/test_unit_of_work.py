"""The unit of work: locks, one sequence bump for every touched session, events only after commit.

And what it buys: every write path that opens a turn announces it, and ask and respond cost a
constant number of statements and transactions however much data the database holds.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select

from backend.bus import TASK_CHANNEL, EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import task_sessions
from backend.domain.events import EventKind
from backend.domain.lifecycle import Answered
from backend.repository import messages, summaries
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.pending.core import trusted
from backend.services.uow import uow
from tests.conftest import redis_url
from tests.lifecycle.support import FAST, Agent, ToolAgent, decide, new_session, running, yes
from tests.services.support import statements

SENTINEL = "test.sentinel"


class Boom(Exception):
    """Raised inside a unit to make it roll back."""


@asynccontextmanager
async def events_of(services: Services) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
    """Every event on the task channel, in order, from the moment the block starts."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    ready = asyncio.Event()

    async def run() -> None:
        async with services.deps.bus.subscribe(TASK_CHANNEL) as events:
            ready.set()
            async for event in events:
                await queue.put(event)

    task = asyncio.create_task(run())
    await ready.wait()
    try:
        yield queue
    finally:
        task.cancel()


async def until_sentinel(services: Services, queue: asyncio.Queue[dict[str, Any]]) -> list[dict[str, Any]]:
    """Publish a sentinel and return everything that arrived before it (the bus keeps order)."""
    await services.deps.bus.publish(TASK_CHANNEL, {"type": SENTINEL})
    seen: list[dict[str, Any]] = []
    while True:
        event = await asyncio.wait_for(queue.get(), 10)
        if event["type"] == SENTINEL:
            return seen
        seen.append(event)


@contextmanager
def statements_by_connection(db: Database) -> Iterator[Counter[Any]]:
    """Statements counted per connection: what a unit ran, whatever ran beside it (the live
    projector's reads of the events the previous unit published, a heartbeat)."""
    counts: Counter[Any] = Counter()

    def count(conn: Any, *_: Any) -> None:
        counts[conn] += 1

    event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    try:
        yield counts
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", count)


async def sequences(db: Database, *session_ids: str) -> list[int]:
    async with db.read() as conn:
        found = {
            r.id: int(r.pending_seq)
            for r in await conn.execute(
                select(task_sessions.c.id, task_sessions.c.pending_seq).where(
                    task_sessions.c.id.in_(session_ids)
                )
            )
        }
    return [found[s] for s in session_ids]


async def test_a_unit_bumps_each_touched_session_once_in_one_statement_and_publishes_after_commit(
    db: Database,
) -> None:
    async with running(db) as svc:
        task_a, a = await new_session(svc)
        _, b = await new_session(svc)
        _, c = await new_session(svc)
        _, untouched = await new_session(svc)
        before = await sequences(db, a, b, c, untouched)
        turn_a = (await svc.reads.turns(a))[0].id

        # The commit's cost (the bump, the summaries' reconciliation) does not depend on how many
        # sessions were touched; the sequences move once per unit, however often a session was touched.
        # A unit of one task reconciles its summary in one statement fewer than a unit of several.
        with statements_by_connection(db) as counts:
            async with uow(svc.deps, [a]) as w:
                w.touch(a)
                mine, start = w.conn.sync_connection, counts[w.conn.sync_connection]
            one = counts[mine] - start
            async with uow(svc.deps, [a, b]) as w:
                w.touch(a, b)
                w.touch(a)
                mine, start = w.conn.sync_connection, counts[w.conn.sync_connection]
            two = counts[mine] - start
            async with uow(svc.deps, [a, b, c]) as w:
                w.touch(a, b, c)
                mine, start = w.conn.sync_connection, counts[w.conn.sync_connection]
            three = counts[mine] - start
        assert one <= two == three
        assert await sequences(db, a, b, c, untouched) == [
            before[0] + 3,
            before[1] + 2,
            before[2] + 1,
            before[3],
        ]

        async with events_of(svc) as queue:
            async with uow(svc.deps, [a]) as w:
                row = await messages.insert_message(
                    w.conn, session_id=a, turn_id=turn_a, kind="message", author="agent", content="hi"
                )
                w.touch(a)
                w.publish(task_a, a, EventKind.MESSAGE_ADDED, message_id=row.id)
                # Queued, not published: nothing but the sentinel arrives while the unit is open.
                assert await until_sentinel(svc, queue) == []
            seen = await until_sentinel(svc, queue)
        assert [(e["type"], e["message_id"]) for e in seen] == [("message.added", row.id)]
        assert await sequences(db, a) == [before[0] + 4]


async def test_a_unit_that_raises_writes_nothing_bumps_nothing_and_publishes_nothing(db: Database) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        before = await sequences(db, session_id)
        turn_id = (await svc.reads.turns(session_id))[0].id

        async def failing_unit() -> None:
            async with uow(svc.deps, [session_id]) as w:
                row = await messages.insert_message(
                    w.conn,
                    session_id=session_id,
                    turn_id=turn_id,
                    kind="message",
                    author="agent",
                    content="never",
                )
                w.touch(session_id)
                w.publish(task_id, session_id, EventKind.MESSAGE_ADDED, message_id=row.id)
                raise Boom

        async with events_of(svc) as queue:
            with pytest.raises(Boom):
                await failing_unit()
            assert await until_sentinel(svc, queue) == []
        assert await sequences(db, session_id) == before
        assert [m.id for m in await svc.reads.messages(session_id, first=None, after=None)] == []


async def test_a_message_that_opens_the_first_turn_announces_it(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc, turn=False)
        async with events_of(svc) as queue:
            message = await svc.operations.post_message(
                session_id, content="hello", author="agent", kind="message"
            )
            seen = await until_sentinel(svc, queue)
        turns = await svc.reads.turns(session_id)
        assert [t.id for t in turns] == [message.turn_id]
        assert [(e["type"], e["turn_id"] or e["message_id"]) for e in seen] == [
            ("turn.started", message.turn_id),
            ("message.added", message.id),
        ]


async def _cycle_counts(svc: Services, db: Database, session_id: str) -> tuple[int, int, int, int]:
    """(transactions, statements) of one ask and of one live respond (claim and confirmation)."""
    tx, st = db.transactions, db.statements
    agent = await Agent.ask(svc, session_id)
    ask = (db.transactions - tx, db.statements - st)
    waiting = agent.wait()
    tx, st = db.transactions, db.statements
    outcome = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
    answered = await agent.outcome()
    respond = (db.transactions - tx, db.statements - st)
    assert waiting.done()
    assert isinstance(answered, Answered), (outcome, answered)
    await agent.close()
    return (*ask, *respond)


async def test_ask_and_respond_cost_the_same_statements_and_transactions_as_data_grows(db: Database) -> None:
    # The hub is not started: no heartbeat and no session-event wake-ups run beside the operations,
    # so the counts are the operations' own.
    async with running(db, heartbeat_seconds=3600.0) as svc:
        await svc.waiters.stop()
        _, session_id = await new_session(svc)
        first = await _cycle_counts(svc, db, session_id)
        # Grow everything the operations read: history of this session, turns, and other sessions
        # with questions of their own.
        for _ in range(15):
            await _cycle_counts(svc, db, session_id)
            await svc.operations.start_turn(session_id)
        others = []
        for _ in range(10):
            _, other = await new_session(svc)
            others.append(await Agent.ask(svc, other))
        later = await _cycle_counts(svc, db, session_id)
        for agent in others:
            await agent.close()
        assert later == first
        ask_tx, _, respond_tx, _ = first
        # One transaction to ask; a live respond is the claim plus the waiter's confirmation.
        assert (ask_tx, respond_tx) == (1, 2)
        if not db.is_sqlite and db.fast_path:
            # PostgreSQL, in messages: the ask is BEGIN with the lock and the held summary row, its
            # context with the insert and its notification outbox rows (none here: nobody has a
            # destination; tests/reach/test_ask_outbox.py has some), and the summary; the claim is
            # BEGIN with the lock and the held summary row, the bundle, the claim and the summary;
            # the confirmation is BEGIN with the lock, then the settling write.
            assert (first[1], first[3]) == (3, 6)


async def test_only_events_that_can_end_a_hold_wake_its_waiter(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        waiter = svc.waiters.register(session_id)
        try:
            # Still asking (no bundle yet): whatever the event, it is of a write the ask itself reads.
            for kind in ("message.updated", "message.deleted", "turn.started", "turn.completed"):
                await svc.waiters._on_session_event({"type": kind, "session_id": session_id})
                assert not waiter.wake_queued, kind
            waiter.pending_id = "a-bundle"
            for kind in ("message.added", "session.state"):
                await svc.waiters._on_session_event({"type": kind, "session_id": session_id})
                assert not waiter.wake_queued, kind
            for kind in ("message.updated", "message.deleted", "turn.started", "turn.completed"):
                await svc.waiters._on_session_event({"type": kind, "session_id": session_id})
                assert waiter.wake_queued, kind
                assert (await waiter.queue.get()).kind == "wake"
                waiter.wake_queued = False
        finally:
            svc.waiters.unregister(waiter)


async def test_a_write_brings_its_tasks_existing_summary_up_to_date_in_its_own_transaction(
    db: Database,
) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        assert (await svc.summaries.refresh([task_id]))[task_id].pending_action is None
        async with events_of(svc) as queue:
            # No live projector runs here: only the ask's own transaction can have written this.
            agent = await Agent.ask(svc, session_id)
            seen = await until_sentinel(svc, queue)
            async with db.read() as conn:
                stored = (await summaries.read_summaries(conn, [task_id]))[task_id]
            assert (stored.revision, stored.pending_action) == (2, "clarification")
            # Its events tell every process's projector that the summary is already current.
            assert seen
            assert all(e.get("projected") is True for e in seen)
            await agent.close()


async def test_a_touch_that_keeps_the_pending_action_skips_the_summary_but_still_bumps(db: Database) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        before = await sequences(db, session_id)

        async def commit_cost(*, kept: bool, also_plain: bool = False) -> int:
            async with uow(svc.deps, [session_id]) as w:
                w.touch(session_id, task_id=task_id, pending_action_kept=kept)
                if also_plain:
                    w.touch(session_id)
                start = db.statements
            return db.statements - start

        plain = await commit_cost(kept=False)
        kept = await commit_cost(kept=True)
        mixed = await commit_cost(kept=True, also_plain=True)
        # The bump alone, against the bump plus the summaries' lock and projection.
        assert kept == 1
        assert plain > kept
        assert mixed == plain  # another write to the same session reconciles as usual
        assert await sequences(db, session_id) == [before[0] + 3]

        async with events_of(svc) as queue:
            async with uow(svc.deps, [session_id]) as w:
                w.touch(session_id, task_id=task_id, pending_action_kept=True)
                w.publish(task_id, session_id, EventKind.SESSION_STATE)
            (event,) = await until_sentinel(svc, queue)
        # The live projector is told the summaries are current: nothing moved them.
        assert event["projected"] is True


def _finds_the_session(sql: str) -> bool:
    """The statement that finds a bundle's session (and on PostgreSQL takes its lock)."""
    return "found_locked" in sql or sql.startswith("SELECT task_session_messages.session_id")


async def test_a_respond_to_a_bundle_this_process_asked_locks_its_session_without_a_lookup(
    db: Database,
) -> None:
    # A bundle never changes session: the process that asked it knows the session, so the respond
    # starts by locking it (on PostgreSQL in BEGIN's own message) instead of finding it first.
    async with running(db, heartbeat_seconds=3600.0) as svc:
        await svc.waiters.stop()
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        agent.wait()
        sql: list[str] = []

        def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if statement not in ("BEGIN", "BEGIN IMMEDIATE"):  # SQLite's own BEGIN statement
                sql.append(statement)

        event.listen(db.engine.sync_engine, "before_cursor_execute", record)
        try:
            await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
            assert isinstance(await agent.outcome(), Answered)
        finally:
            event.remove(db.engine.sync_engine, "before_cursor_execute", record)
        await agent.close()
        assert not any(_finds_the_session(s) for s in sql)
        if not db.is_sqlite and db.fast_path:
            assert sql[0].startswith("BEGIN;")
        # Another process (here: one that forgot) finds the session through the bundle, as before.
        other = await Agent.ask(svc, session_id)
        other.wait()
        svc.pending.core.sessions.clear()
        sql.clear()
        event.listen(db.engine.sync_engine, "before_cursor_execute", record)
        try:
            await svc.pending.respond(other.pending_id, yes("q1"), rejected=False, authorize=trusted)
            assert isinstance(await other.outcome(), Answered)
        finally:
            event.remove(db.engine.sync_engine, "before_cursor_execute", record)
        await other.close()
        assert _finds_the_session(sql[0])


@pytest.mark.parametrize("kind", ["clarification", "permission"])
async def test_a_respond_in_another_process_locks_the_session_the_asking_process_announced(
    db: Database, database_url: str, kind: str
) -> None:
    # Two processes on one database and one shared bus (Redis): A asks (its agent waits there), B
    # answers. A's ask announced the bundle's session, so B's respond locks it at once, exactly as
    # A's own would (on PostgreSQL in BEGIN's own message), and the answer reaches A's agent through
    # the bus. Both kinds of pending action.
    b_db = Database(database_url)  # B's own connections: its statements are counted apart
    bus = EventBus(redis_url())
    await bus.connect()
    fast: dict[str, Any] = FAST
    a = Services.build(Deps(db=db, bus=bus, settings=Settings(database_url=db.url, **fast)))
    b = Services.build(Deps(db=b_db, bus=bus, settings=Settings(database_url=db.url, **fast)))
    # B's hub only listens (it hears the bundle's session); its projector would read the summaries
    # of A's ask at any moment, in among the respond's statements counted below.
    b.live.projector = False
    try:
        for process in (a, b):
            await process.waiters.start()
        await b.live.start()
        _, session_id = await new_session(a)
        agent = await (Agent.ask(a, session_id) if kind == "clarification" else ToolAgent.ask(a, session_id))
        agent.wait()
        deadline = asyncio.get_running_loop().time() + 10
        while agent.pending_id not in b.pending.core.sessions:
            assert asyncio.get_running_loop().time() < deadline, "B never heard of the bundle"
            await asyncio.sleep(0.01)
        with statements(b_db) as sql:
            if kind == "clarification":
                await b.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
                assert isinstance(await agent.outcome(), Answered)
            else:
                await decide(b, agent.pending_id)
                assert isinstance(await agent.outcome(), Answered)  # allowed
        await agent.close()
        assert not any(_finds_the_session(s) for s in sql)
        if not b_db.is_sqlite and b_db.fast_path:
            assert sql[0].startswith("BEGIN;")
    finally:
        await b.live.stop()
        for process in (a, b):
            await process.waiters.stop()
        await bus.disconnect()
        await b_db.dispose()
