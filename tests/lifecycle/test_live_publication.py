"""On the live path a claimed answer's terminal message events go out only after its delivery succeeded.

While the waiter has not confirmed the hand-off, subscribers hear nothing of the claim: an event
there would show other clients an answered question the agent may never get. A failed delivery
publishes the restored (pending) rows instead, so no client ever sees the claim as terminal.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from backend.bus import TASK_CHANNEL
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import INTENT_KEY, Answer
from backend.services.container import Services
from backend.services.pending.core import trusted
from tests.lifecycle.support import Agent, new_session, questions, rows, running

READY = "test.observer_ready"


@asynccontextmanager
async def observed(
    svc: Services, db: Database, pending_id: str
) -> AsyncIterator[list[list[tuple[str, bool]]]]:
    """For every `message.updated` of the bundle's rows: the rows' (status, intent set) as a
    subscriber re-reading them on that event finds them."""
    seen: list[list[tuple[str, bool]]] = []
    ready = asyncio.Event()
    ids = {r["id"] for r in await rows(db, pending_id)}

    async def run() -> None:
        async with svc.deps.bus.subscribe(TASK_CHANNEL) as events:
            await svc.deps.bus.publish(TASK_CHANNEL, {"type": READY})
            async for event in events:
                if event.get("type") == READY:
                    ready.set()
                elif event.get("type") == "message.updated" and event.get("message_id") in ids:
                    stored = await rows(db, pending_id)
                    seen.append([(r["status"], bool(r.get(INTENT_KEY))) for r in stored])

    task = asyncio.create_task(run())
    await asyncio.wait_for(ready.wait(), 10)
    try:
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def claimed(db: Database, pending_id: str) -> None:
    for _ in range(500):
        if all(r.get(INTENT_KEY) for r in await rows(db, pending_id)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the answer was never claimed")


def answers(count: int) -> list[Answer]:
    return [Answer(f"q{i + 1}", (f"q{i + 1}_opt2",), None) for i in range(count)]


# One question: on PostgreSQL the confirmation is one message of its own; two: a unit of work.
@pytest.mark.parametrize("count", [1, 2])
async def test_a_live_answers_terminal_events_are_published_only_once_the_waiter_confirmed_it(
    db: Database, count: int
) -> None:
    async with running(db, live_confirmation_seconds=30.0) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(count))  # not consuming the hand-off yet
        async with observed(svc, db, agent.pending_id) as seen:
            responding = asyncio.create_task(
                svc.pending.respond(agent.pending_id, answers(count), rejected=False, authorize=trusted)
            )
            await claimed(db, agent.pending_id)
            await asyncio.sleep(0.3)  # events of the claim, had there been any, arrive meanwhile
            assert seen == [], "the claim was published before its delivery was confirmed"
            assert not responding.done()
            agent.wait()  # the waiter takes the hand-off and confirms it
            assert isinstance(await asyncio.wait_for(responding, 10), lc.Responded)
            assert isinstance(await agent.outcome(), lc.Answered)
            for _ in range(300):
                if len(seen) >= count:
                    break
                await asyncio.sleep(0.01)
        assert len(seen) == count
        # Each event found the answer delivered: terminal, its delivery intent already settled.
        assert all(observation == [("answered", False)] * count for observation in seen)
        await agent.close()


@pytest.mark.parametrize("count", [1, 2])
async def test_a_live_answer_that_is_never_confirmed_publishes_only_its_restored_pending_rows(
    db: Database, count: int
) -> None:
    async with running(db, live_confirmation_seconds=0.5) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(count))  # never consumes the hand-off
        async with observed(svc, db, agent.pending_id) as seen:
            result = await svc.pending.respond(
                agent.pending_id, answers(count), rejected=False, authorize=trusted
            )
            assert isinstance(result, lc.DeliveryFailed)
            assert result.retryable is True
            for _ in range(300):
                if len(seen) >= count:
                    break
                await asyncio.sleep(0.01)
        assert len(seen) == count
        assert all(observation == [("pending", False)] * count for observation in seen)
        await agent.close()
