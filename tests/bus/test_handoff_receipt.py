"""A cross-process hand-off whose receipt never reaches the responder (the bus lost it), in the
discipline of scenario S23: two server processes (two service containers with their own instance
ids and their own connections to a real Redis of the test's own), one database, both dialects.

The responder gives up after the short receipt bound, not the live-confirmation bound, and restores
its claim; the waiter's confirmation and the restore serialize on the claim in the database, so
exactly one wins whichever reaches it first. The `handoff.reply` fault point drops the receipt; a
gate holds a service step at its start, so the test decides the order.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from backend import faults
from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.pending.core import trusted
from tests.bus.support import redis_process
from tests.lifecycle.support import FAST, Agent, new_session, rows, yes

RECEIPT = 0.5  # the receipt bound of these tests
CONFIRMATION = 120.0  # the live-confirmation bound: never reached here
WITHIN = 30.0  # generous: far below the confirmation bound, far above the receipt bound


@dataclasses.dataclass
class Gate:
    """Holds one service step at its start: `entered` once reached, runs on when `release` is set."""

    entered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def around(self, step: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def held(*args: Any) -> Any:
            self.entered.set()
            await self.release.wait()
            return await step(*args)

        return held


def gate(part: object, monkeypatch: pytest.MonkeyPatch, name: str) -> Gate:
    g = Gate()
    monkeypatch.setattr(part, name, g.around(getattr(part, name)))
    return g


@asynccontextmanager
async def two_processes(db: Database) -> AsyncIterator[tuple[Services, Services]]:
    """The agent's process and the responder's, sharing the database and a real Redis bus."""
    with redis_process() as redis:
        settings = Settings(
            database_url=db.url,
            max_wait_seconds=30.0,
            live_confirmation_seconds=CONFIRMATION,
            persistence_seconds=FAST["persistence_seconds"],
            dispatch_seconds=FAST["dispatch_seconds"],
            heartbeat_seconds=FAST["heartbeat_seconds"],
            handoff_receipt_seconds=RECEIPT,
        )
        built: list[Services] = []
        try:
            for _ in range(2):
                bus = EventBus(redis.url, ping_seconds=0.3, silence_seconds=1.5, publish_seconds=1.0)
                await bus.connect()
                svc = Services.build(Deps(db=db, bus=bus, settings=settings))
                await svc.waiters.start()
                built.append(svc)
            yield built[0], built[1]
        finally:
            for svc in built:
                await svc.waiters.stop()
                await svc.deps.bus.disconnect()


async def waiting_agent(agents: Services, timeout_seconds: float) -> Agent:
    """An agent in the first process waiting live on a new session's question."""
    _, session_id = await new_session(agents)
    agent = await Agent.ask(agents, session_id, timeout_seconds=timeout_seconds)
    agent.wait()
    return agent


async def answer(responders: Services, agent: Agent) -> lc.RespondOutcome:
    """The person's answer, through the second process."""
    return await responders.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)


@pytest.fixture
def lost_receipts() -> Iterator[None]:
    faults.configure(["handoff.reply"])
    yield
    faults.configure(())


@pytest.mark.scenario("S23")
@pytest.mark.usefixtures("lost_receipts")
async def test_a_hand_off_without_receipt_is_restored_within_the_receipt_bound_and_never_delivered(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with two_processes(db) as (agents, responders):
        agent = await waiting_agent(agents, timeout_seconds=5.0)
        confirmation = gate(agents.pending.asking, monkeypatch, "finalize")
        responding = asyncio.create_task(answer(responders, agent))
        await asyncio.wait_for(confirmation.entered.wait(), WITHIN)  # the waiter got the hand-off
        result = await asyncio.wait_for(responding, WITHIN)
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is True
        restored = await rows(db, agent.pending_id)
        assert [r["status"] for r in restored] == ["pending"]
        assert not {"response", "response_delivery_pending", "delivery_claim_id"} & restored[0].keys()
        confirmation.release.set()
        # The late confirmation finds no claim to finalize: the agent never gets this answer.
        outcome = await agent.outcome(WITHIN)
        assert isinstance(outcome, lc.Detached)
        assert [r["status"] for r in await rows(db, agent.pending_id)] == ["pending"]
        bundle = await responders.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        await agent.close()


@pytest.mark.scenario("S23")
@pytest.mark.usefixtures("lost_receipts")
async def test_a_confirmation_that_commits_before_the_late_restore_is_reported_as_delivered_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with two_processes(db) as (agents, responders):
        agent = await waiting_agent(agents, timeout_seconds=20.0)
        confirmation = gate(agents.pending.asking, monkeypatch, "finalize")
        recovery = gate(responders.pending.responding, monkeypatch, "_recover_claim")
        responding = asyncio.create_task(answer(responders, agent))
        await asyncio.wait_for(confirmation.entered.wait(), WITHIN)
        await asyncio.wait_for(recovery.entered.wait(), WITHIN)  # no receipt: the responder gives up
        confirmation.release.set()
        outcome = await agent.outcome(WITHIN)  # the confirmation committed first
        assert isinstance(outcome, lc.Answered)
        assert outcome.answers == tuple(yes("q1"))
        finalized = await rows(db, agent.pending_id)
        assert [r["status"] for r in finalized] == ["answered"]
        recovery.release.set()
        result = await asyncio.wait_for(responding, WITHIN)
        # The restore found the claim settled: success, nothing reopened, nothing delivered again.
        assert isinstance(result, lc.Responded)
        assert await rows(db, agent.pending_id) == finalized
        again = await answer(responders, agent)
        assert isinstance(again, lc.Conflict)
        await agent.close()


async def test_a_received_hand_off_across_processes_is_confirmed_without_waiting_for_a_bound(
    db: Database,
) -> None:
    async with two_processes(db) as (agents, responders):
        agent = await waiting_agent(agents, timeout_seconds=20.0)
        result = await asyncio.wait_for(answer(responders, agent), WITHIN)
        assert isinstance(result, lc.Responded)
        outcome = await agent.outcome(WITHIN)
        assert isinstance(outcome, lc.Answered)
        await agent.close()
