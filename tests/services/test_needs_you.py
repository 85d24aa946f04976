"""Needs you, in process: the inbox costs the same statements for one item as for fifty."""

from __future__ import annotations

import asyncio

from backend.db.engine import Database
from backend.services.container import Services
from tests.lifecycle.support import Driver, Kind, new_session, running


async def _asked(services: Services, kind: Kind, count: int) -> tuple[list[str], list[Driver]]:
    """`count` sessions of as many tasks, each with one open request of `kind`: (tasks, agents)."""
    tasks, agents = [], []
    for _ in range(count):
        task_id, session_id = await new_session(services)
        tasks.append(task_id)
        agents.append(await kind.ask(services, session_id))
    return tasks, agents


async def _statements_of_inbox(
    db: Database, services: Services, task_ids: list[str] | None
) -> tuple[int, int]:
    """(statements other than BEGIN, items) of one inbox read: the fewest of three, since the waiter
    hub's heartbeat writes in the background meanwhile."""
    counts = []
    for _ in range(3):
        before = db.statements - db.begins
        items = await services.needs_you.inbox(task_ids, 100)
        counts.append(db.statements - db.begins - before)
    return min(counts), len(items)


async def test_the_inbox_costs_a_constant_number_of_statements_for_one_item_or_fifty(
    db: Database, kind: Kind
) -> None:
    async with running(db) as services:
        tasks, agents = await _asked(services, kind, 50)
        try:
            one = await _statements_of_inbox(db, services, tasks[:1])
            fifty = await _statements_of_inbox(db, services, tasks)
            every = await _statements_of_inbox(db, services, None)
        finally:
            for agent in agents:
                await agent.close()
    assert (one[1], fifty[1], every[1]) == (1, 50, 50)
    assert one[0] == fifty[0] == every[0], (one, fifty, every)
    assert one[0] == (1 if db.is_sqlite else 2)  # PostgreSQL: plans for the values given, then the read


async def _change_reaching(db: Database, services: Services, kind: Kind, inboxes: int) -> tuple[int, int]:
    """One new request reaching `inboxes` open inboxes of its task (and as many of every task):
    (statements other than BEGIN the hub read for it, inboxes that received it)."""
    hub = services.needs_you_live
    task_id, session_id = await new_session(services)
    registrations = [
        hub.watch(None if i % 2 else "u", frozenset({task_id}) if i % 2 == 0 else None, 100)
        for i in range(inboxes)
    ]
    watchers = [r.__enter__() for r in registrations]
    try:
        for watcher in watchers:
            await hub.snapshot(watcher)
            assert [i for i in await watcher.mailbox.get() if i.task_id == task_id] == []
        reads, before = hub.reads, db.statements - db.begins
        agent = await kind.ask(services, session_id)
        try:
            received = [await asyncio.wait_for(w.mailbox.get(), 5) for w in watchers]
            spent = db.statements - db.begins - before
        finally:
            await agent.close()
        assert hub.reads - reads == 1
        mine = [[i.pending_id for i in items if i.task_id == task_id] for items in received]
        assert mine == [[agent.pending_id]] * inboxes
        return spent, len(received)
    finally:
        for r in registrations:
            r.__exit__(None, None, None)


async def test_a_change_reaches_every_open_inbox_with_one_read_per_process(db: Database, kind: Kind) -> None:
    async with running(db) as services:
        await services.needs_you_live.start()
        try:
            few = await _change_reaching(db, services, kind, 2)
            many = await _change_reaching(db, services, kind, 200)
        finally:
            await services.needs_you_live.stop()
    assert (few[1], many[1]) == (2, 200)
    # The ask's own statements and the hub's one read: the same however many inboxes are open.
    assert abs(many[0] - few[0]) <= 2, (few, many)
