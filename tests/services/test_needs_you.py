"""Needs you, in process: the inbox costs the same statements for one item as for fifty."""

from __future__ import annotations

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
    assert one[0] == 1
