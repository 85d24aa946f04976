"""S24: a live wait that ends after a responder loaded its request but before it claimed delivery.

A respond loads its bundle and claims it in one transaction under the session lock, but an agent's
wait ends in memory first (its transport went away, its wait was cancelled) and only then detaches
its rows, which waits for that lock. A responder that loaded the request while it was live must not
hand its answer to the waiter that is gone and wait on a confirmation nobody sends: it takes the
detached way at once, and the answer reaches the agent exactly once.

A cancel of the request, by contrast, takes the session lock like the respond, so a respond queued
behind a cancel finds the request closed: a stale answer (S15).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend import faults
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import INTENT_KEY, BundleState, ConflictReason
from backend.repository import bundles
from backend.services.pending.core import trusted
from backend.services.resume import ResumeOutcome
from tests.lifecycle.support import Kind, ScriptedResumer, new_session, recording, rows, running
from tests.resume.support import eventually

# A claim handed to the waiter below would wait this long for a confirmation that never comes.
CONFIRMATION_SECONDS = 30.0
AT_ONCE_SECONDS = 3.0


@pytest.mark.scenario("S24")
@pytest.mark.parametrize("skip", [False, True], ids=["answer", "skip-or-deny"])
# Held after its load (the claim not yet written), or after its claim committed, before the hand-off.
@pytest.mark.parametrize("held_at", ["respond.loaded", "respond.claimed"])
async def test_a_live_wait_ending_after_the_responder_loaded_it_sends_the_response_the_detached_way_once(
    db: Database, kind: Kind, skip: bool, held_at: str
) -> None:
    async with running(db, live_confirmation_seconds=CONFIRMATION_SECONDS) as svc:
        _, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.pending.resumer = resumer
        agent = await kind.ask(svc, session_id)
        bundle = agent.bundle
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_LIVE
        waiter_id = bundle.waiter_id
        waiting = agent.wait()

        loaded, go_on = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            loaded.set()
            await go_on.wait()

        with faults.holding(held_at, hold):
            responding = asyncio.create_task(
                kind.skip_or_deny(svc, agent.pending_id) if skip else kind.answer(svc, agent.pending_id)
            )
            await asyncio.wait_for(loaded.wait(), 5)
            # The agent's wait ends now: it leaves this process's waiters at once (its detach, which
            # needs the session lock, finds nothing left to detach once the claim is written).
            waiting.cancel()
            await eventually(lambda: not svc.waiters.is_local_waiter(waiter_id))
            assert not responding.done()
            go_on.set()
            # (Secondary: a responder waiting on the gone waiter would take the whole window.)
            result = await asyncio.wait_for(responding, CONFIRMATION_SECONDS / 3)
        assert isinstance(result, lc.Responded), result
        assert result.bundle.state == BundleState.TERMINAL
        with pytest.raises(asyncio.CancelledError):
            await waiting
        stored = await rows(db, agent.pending_id)
        assert [r["agent_disconnected"] for r in stored] == [True]
        if skip:
            # A skip (a denial) of a detached request is final as stored: nobody is prompted with it.
            assert result.resumed is False
            assert [r["status"] for r in stored] == ["rejected"]
            assert not any(INTENT_KEY in r for r in stored)
            assert resumer.claims == []
        else:
            # The detached agent is resumed with the answer, exactly once.
            assert result.resumed is True
            assert [r["status"] for r in stored] == ["answered"]
            (claim,) = resumer.claims
            assert claim.pending_id == agent.pending_id
            assert claim.answers == kind.answers(bundle)
            assert [r["delivery_claim_id"] for r in stored] == [claim.claim_id]
        # A second answer reaches nobody: the first one's delivery (or the skip) stands.
        again = await kind.answer(svc, agent.pending_id)
        assert isinstance(again, lc.Conflict)
        # (The scripted resume seam leaves the claim for the orchestrator to settle.)
        assert again.reason == (ConflictReason.TERMINAL if skip else ConflictReason.DELIVERY_CLAIMED)
        assert len(resumer.claims) == (0 if skip else 1)
        await agent.stream.aclose()


@pytest.mark.scenario("S15")
async def test_a_respond_in_flight_while_a_cancel_commits_returns_the_cancelled_bundle_at_once(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    async with running(db, live_confirmation_seconds=CONFIRMATION_SECONDS) as svc:
        _, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.pending.resumer = resumer
        # A live waiter that consumes nothing: any hand-off to it would stay unconfirmed.
        agent = await kind.ask(svc, session_id)

        # The cancel stops after its write, inside its unit of work: the session lock stays held.
        written = asyncio.Event()
        go_on = asyncio.Event()
        close_pending = bundles.close_pending

        async def held_close(*args: Any, **kwargs: Any) -> list[str]:
            changed = await close_pending(*args, **kwargs)
            written.set()
            await go_on.wait()
            return changed

        monkeypatch.setattr(bundles, "close_pending", held_close)
        async with recording(svc) as log:
            cancelling = asyncio.create_task(svc.pending.cancel(agent.pending_id, authorize=trusted))
            await asyncio.wait_for(written.wait(), 5)
            responding = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
            await asyncio.sleep(0.2)
            assert not responding.done(), "the respond decided while the cancel held the session"
            loop = asyncio.get_running_loop()
            released = loop.time()
            go_on.set()
            assert await asyncio.wait_for(cancelling, 5) is True
            result = await asyncio.wait_for(responding, AT_ONCE_SECONDS)
            waited = loop.time() - released
        assert waited < AT_ONCE_SECONDS < CONFIRMATION_SECONDS
        # The closed bundle, as the cancel left it: the caller learns there is nobody to deliver to.
        assert isinstance(result, lc.Conflict)
        assert result.reason == ConflictReason.TERMINAL
        assert result.bundle is not None
        assert result.bundle.state == BundleState.TERMINAL
        assert [r.status for r in result.bundle.rows] == ["cancelled"]
        # It never claimed: no answer, no delivery intent, no event of its own.
        stored = await rows(db, agent.pending_id)
        assert [r["status"] for r in stored] == ["cancelled"]
        assert not any("response" in r or INTENT_KEY in r or "delivery_claim_id" in r for r in stored)
        assert log.kinds("message.updated") == [stored[0]["id"]]
        # Nobody is resumed or prompted; the agent hears the cancellation, never an answer.
        assert resumer.claims == []
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Closed)
        assert outcome.status == "cancelled"
        await agent.close()
