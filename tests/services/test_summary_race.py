"""Two reconcilers (two server processes: two engines, one database) race the summary compare-and-set
at the same instant: exactly one write wins per change, the loser re-reads and converges, and the
revision advances once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import task_status_summaries
from backend.services.context import Deps
from backend.services.pending.core import trusted
from backend.services.summaries import SUMMARY_CHANNEL, Summaries
from tests.lifecycle.support import Agent, running, yes
from tests.services.support import ask, services_for, stored_summary
from tests.services.test_summaries import running_session


class SameInstantWrites(Database):
    """A process's database whose first write waits until the other process reaches its first write,
    so both compare-and-set against the same stored revision."""

    def __init__(self, url: str, barrier: asyncio.Barrier) -> None:
        super().__init__(url)
        self.barrier: asyncio.Barrier | None = barrier

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        if self.barrier is not None:
            barrier, self.barrier = self.barrier, None
            await asyncio.wait_for(barrier.wait(), 10)
        async with super().write() as conn:
            yield conn


async def test_two_reconcilers_racing_the_compare_and_set_advance_each_revision_once(db: Database) -> None:
    async with services_for(db) as services:
        changed, created = [], []
        for i in range(3):
            task_id, session_id = await running_session(services, f"changed {i}")
            await services.summaries.refresh([task_id])
            await ask(db, session_id)
            changed.append(task_id)
        async with db.write() as conn:  # a stale, unrelated field that nobody may overwrite
            await conn.execute(update(task_status_summaries).values(fields={"workflow": "review"}))
        for i in range(2):
            created.append((await running_session(services, f"new {i}"))[0])
        tasks = changed + created
        before = {t: await stored_summary(db, t) for t in changed}
        barrier = asyncio.Barrier(2)
        processes = [SameInstantWrites(db.url, barrier) for _ in range(2)]
        bus = services.deps.bus
        published: list[dict[str, Any]] = []
        listening = asyncio.Event()

        async def listen() -> None:
            async with bus.subscribe(SUMMARY_CHANNEL) as events:
                listening.set()
                async for e in events:
                    published.append(e)

        listener = asyncio.create_task(listen())
        await listening.wait()
        try:
            reconcilers = [
                Summaries(Deps(db=p, bus=bus, settings=Settings(database_url=db.url))) for p in processes
            ]
            first, second = await asyncio.gather(*(r.reconcile(tasks) for r in reconcilers))
            for task_id in tasks:
                a, b = first[task_id].summary, second[task_id].summary
                assert a is not None
                assert b is not None
                # Both converge on the same durable summary, whichever of them wrote it.
                assert (a.revision, a.pending_action) == (b.revision, b.pending_action)
                held = await stored_summary(db, task_id)
                assert held is not None
                assert (held["revision"], held["pending_action"]) == (a.revision, a.pending_action)
            for task_id in changed:
                held = await stored_summary(db, task_id)
                was = before[task_id]
                assert held is not None
                assert was is not None
                assert held["pending_action"] == "clarification"
                assert held["revision"] == was["revision"] + 1, "both won: the revision moved twice"
                assert held["fields"] == {"workflow": "review"}
            for task_id in created:
                held = await stored_summary(db, task_id)
                assert held is not None
                assert (held["revision"], held["pending_action"]) == (1, None)
            # Only the winner of each write published it: one summary event per task.
            for _ in range(100):
                if len(published) >= len(tasks):
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)  # a duplicate from the loser would have arrived by now
            assert sorted(e["task_id"] for e in published) == sorted(tasks)
        finally:
            listener.cancel()
            for p in processes:
                await p.dispose()


async def test_sibling_sessions_asking_and_answering_at_once_leave_the_summary_derived(db: Database) -> None:
    """Units of sibling sessions of one task hold the task's summary row from their first statement
    (PostgreSQL) or run one after another (SQLite): however they interleave with each other and with
    readers' repairs, nothing deadlocks and the stored summary ends as the derivation says."""
    async with running(db) as svc:
        task = await svc.operations.create_task("siblings")
        sessions = []
        for i in range(6):
            session = await svc.operations.create_session(task.id, is_primary=i == 0, input_capable=True)
            await svc.operations.start_turn(session.id)
            sessions.append(session.id)
        await svc.summaries.refresh([task.id])

        async def ask_and_answer(session_id: str, answer: bool) -> None:
            agent = await Agent.ask(svc, session_id)
            agent.wait()
            if answer:
                await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
                await agent.outcome()
            await agent.close()

        for _ in range(3):
            await asyncio.gather(
                *(ask_and_answer(s, answer=i % 2 == 0) for i, s in enumerate(sessions)),
                svc.summaries.reconcile([task.id]),
            )
        agent = await Agent.ask(svc, sessions[0])  # one question left open
        stored = await stored_summary(db, task.id)
        views = await svc.summaries.reconcile([task.id])
        await agent.close()
    assert stored is not None
    assert stored["pending_action"] == "clarification"
    summary = views[task.id].summary
    assert summary is not None
    assert summary.revision == stored["revision"]  # nothing was left to repair
