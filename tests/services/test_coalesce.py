"""Subscriptions starting together share their snapshot reads, and each still reads what was
committed before it asked (`backend/services/coalesce.py`)."""

from __future__ import annotations

import asyncio

import pytest

from backend.db.engine import Database
from backend.domain.errors import NotFound
from backend.services.coalesce import Coalesced
from backend.services.reads import SessionsWithPending
from tests.lifecycle.support import Agent, new_session, running
from tests.services.support import statements


async def test_snapshots_asked_together_are_one_read_each_with_its_own_tasks(db: Database) -> None:
    async with running(db) as svc:
        tasks = [await new_session(svc) for _ in range(3)]
        agent = await Agent.ask(svc, tasks[1][1])
        try:
            alone = {t: await svc.reads.sessions_with_pending([t]) for t, _ in tasks}
            with statements(db) as sql:
                together = await asyncio.gather(
                    *(svc.reads.snapshot_coalesced([t]) for _ in range(20) for t, _ in tasks)
                )
                await asyncio.gather(
                    *(svc.reads.require_task_coalesced(t) for _ in range(20) for t, _ in tasks)
                )
            # 120 callers: the first of each kind reads at once, every other one joins the next read.
            assert len(sql) <= 4, sql
            for i, (sessions, projections) in enumerate(together):
                task_id = tasks[i % len(tasks)][0]
                assert (sessions, projections) == alone[task_id]
                assert [s.task_id for s in sessions] == [task_id]
            assert together[1][1][tasks[1][1]].pending_action == "clarification"
        finally:
            await agent.close()


async def test_a_missing_task_is_not_found_for_its_caller_only(db: Database) -> None:
    async with running(db) as svc:
        task_id, _ = await new_session(svc)
        found, missing = await asyncio.gather(
            svc.reads.require_task_coalesced(task_id),
            svc.reads.require_task_coalesced("no-such-task"),
            return_exceptions=True,
        )
        assert found is None
        assert isinstance(missing, NotFound)


async def test_a_caller_never_joins_a_read_that_started_before_it_asked(db: Database) -> None:
    # The first read is held open (a gate around the real read); a question asked meanwhile is
    # committed, then a second caller asks: it must see the question, so it reads again, after.
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        gate = asyncio.Event()
        started = asyncio.Event()

        async def gated(task_ids: list[str]) -> SessionsWithPending:
            started.set()
            await gate.wait()
            return await svc.reads.sessions_with_pending(task_ids)

        reads: Coalesced[str, SessionsWithPending] = Coalesced(gated)
        first = asyncio.create_task(reads.read([task_id]))
        await started.wait()
        agent = await Agent.ask(svc, session_id)
        try:
            second = asyncio.create_task(reads.read([task_id]))
            third = asyncio.create_task(reads.read([task_id]))  # joins the second's batch
            await asyncio.sleep(0)
            gate.set()
            _, before = await first
            _, after = await second
            assert reads.reads == 2
            assert await third == (await second)
            assert after[session_id].pending_action == "clarification"
            # The first read began before the question: whichever it saw, the second saw the question.
            assert before[session_id].revision.key() <= after[session_id].revision.key()
        finally:
            await agent.close()


async def test_a_failed_read_fails_its_batch_only_and_a_caller_gone_leaves_the_read_to_the_others(
    db: Database,
) -> None:
    async with running(db) as svc:
        task_id, _ = await new_session(svc)
        gate = asyncio.Event()
        calls: list[list[str]] = []

        async def read(task_ids: list[str]) -> list[str]:
            calls.append(task_ids)
            await gate.wait()
            if len(calls) == 1:
                raise RuntimeError("the database went away")
            return [t.id for t in await svc.reads.tasks(task_ids)]

        reads: Coalesced[str, list[str]] = Coalesced(read)
        failing = asyncio.create_task(reads.read([task_id]))
        await asyncio.sleep(0)
        gone = asyncio.create_task(reads.read([task_id]))
        staying = asyncio.create_task(reads.read([task_id]))
        await asyncio.sleep(0)
        gone.cancel()
        gate.set()
        with pytest.raises(RuntimeError, match="went away"):
            await failing
        assert await staying == [task_id]
        assert gone.cancelled()
        assert calls == [[task_id], [task_id]]


async def test_a_batch_holds_at_most_max_keys(db: Database) -> None:
    async with running(db) as svc:
        ids = [(await new_session(svc))[0] for _ in range(5)]
        seen: list[int] = []

        async def read(task_ids: list[str]) -> list[str]:
            seen.append(len(task_ids))
            return [t.id for t in await svc.reads.tasks(task_ids)]

        reads: Coalesced[str, list[str]] = Coalesced(read, max_keys=2)
        results = await asyncio.gather(*(reads.read([t]) for t in ids))
        assert all(t in r for t, r in zip(ids, results, strict=True))
        assert max(seen) <= 2
