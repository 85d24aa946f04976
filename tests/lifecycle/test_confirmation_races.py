"""A waiter's confirmation that outlives the responder's bounded wait (scenario S23), both dialects.

The confirmation write and the responder's recovery are each held at their start by a gate, so the
test decides which reaches the database first; repository serialization (both need the claim's
intent, under the session lock) must then let exactly that one win.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, rows, running

BOUND = 0.2  # the responder's live-confirmation bound: the held confirmation outlives it


@dataclasses.dataclass
class Gate:
    """Holds one service step at its start: `entered` once reached, runs on when `release` is set."""

    entered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    claims: list[lc.Claim] = dataclasses.field(default_factory=list)

    def around(self, step: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def held(claim: lc.Claim, *args: Any) -> Any:
            self.claims.append(claim)
            self.entered.set()
            await self.release.wait()
            return await step(claim, *args)

        return held


def gate(part: object, monkeypatch: pytest.MonkeyPatch, name: str) -> Gate:
    g = Gate()
    monkeypatch.setattr(part, name, g.around(getattr(part, name)))
    return g


async def entered(g: Gate) -> None:
    await asyncio.wait_for(g.entered.wait(), 10)


def assert_immutable(claim: lc.Claim) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        claim.message_ids = ()  # type: ignore[misc]


@pytest.mark.scenario("S23")
async def test_a_late_confirmation_loses_to_the_responders_restore_and_never_reaches_the_agent(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    async with running(db, live_confirmation_seconds=BOUND) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        assert agent.bundle is not None
        agent.wait()
        confirmation = gate(svc.pending.asking, monkeypatch, "finalize")
        responding = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
        await entered(confirmation)  # the confirmation started; the responder's bound runs out
        result = await responding
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is True
        restored = await rows(db, agent.pending_id)
        assert [r["status"] for r in restored] == ["pending"]
        assert not {"response", "response_delivery_pending", "delivery_claim_id"} & restored[0].keys()
        confirmation.release.set()
        # The confirmation finds no intent of its claim: it changes nothing and the agent gets no answer.
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Detached)
        assert await rows(db, agent.pending_id) == restored
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        # The claim the waiter held is the responder's snapshot, unchanged and unchangeable.
        (held,) = confirmation.claims
        assert held.message_ids == (restored[0]["id"],)
        assert held.answers == kind.answers(agent.bundle)
        assert_immutable(held)
        await agent.close()


@pytest.mark.scenario("S23")
async def test_a_late_confirmation_that_commits_first_is_never_reopened_by_the_responders_recovery(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    async with running(db, live_confirmation_seconds=BOUND) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        assert agent.bundle is not None
        agent.wait()
        confirmation = gate(svc.pending.asking, monkeypatch, "finalize")
        recovery = gate(svc.pending.responding, monkeypatch, "_recover_claim")
        responding = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
        await entered(confirmation)
        await entered(recovery)  # the responder's bound ran out while the confirmation was in flight
        confirmation.release.set()
        outcome = await agent.outcome()  # the confirmation committed first: the agent has the answer
        assert isinstance(outcome, lc.Answered)
        assert outcome.answers == kind.answers(agent.bundle)
        finalized = await rows(db, agent.pending_id)
        assert [r["status"] for r in finalized] == ["answered"]
        assert "response_delivery_pending" not in finalized[0]
        recovery.release.set()
        result = await responding
        # Recovery found the claim settled: it neither restores nor retires, and reports success.
        assert isinstance(result, lc.Responded)
        assert result.bundle.state == BundleState.TERMINAL
        assert await rows(db, agent.pending_id) == finalized
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.TERMINAL
        again = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(again, lc.Conflict)
        # Both sides worked from one immutable claim.
        assert confirmation.claims == recovery.claims
        assert_immutable(recovery.claims[0])
        await agent.close()
