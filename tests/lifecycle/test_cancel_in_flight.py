"""S24 where our design puts its window: a respond arriving while a cancel of its live question runs.

A respond loads its bundle and claims it in one transaction under the session lock, and a cancel
takes that lock too, so no cancel can fall between a responder's load and its claim. What is left of
the scenario is a responder already in flight when the cancel commits: it must return at once with
the closed bundle, never claim, and so never wait on a confirmation no waiter will send.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import INTENT_KEY, BundleState, ConflictReason
from backend.repository import clarifications as repo
from backend.services.bundles import trusted
from tests.lifecycle.support import Kind, new_session, recording, rows, running

# A claim handed to the waiter below would wait this long for a confirmation that never comes.
CONFIRMATION_SECONDS = 30.0
AT_ONCE_SECONDS = 3.0


@pytest.mark.scenario("S24")
async def test_a_respond_in_flight_while_a_cancel_commits_returns_the_cancelled_bundle_at_once(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    async with running(db, live_confirmation_seconds=CONFIRMATION_SECONDS) as svc:
        _, session_id = await new_session(svc)
        # A live waiter that consumes nothing: any hand-off to it would stay unconfirmed.
        agent = await kind.ask(svc, session_id)

        # The cancel stops after its write, inside its unit of work: the session lock stays held.
        written = asyncio.Event()
        go_on = asyncio.Event()
        close_pending = repo.close_pending

        async def held_close(*args: Any, **kwargs: Any) -> list[str]:
            changed = await close_pending(*args, **kwargs)
            written.set()
            await go_on.wait()
            return changed

        monkeypatch.setattr(repo, "close_pending", held_close)
        async with recording(svc) as log:
            cancelling = asyncio.create_task(svc.clarifications.cancel(agent.pending_id, authorize=trusted))
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
        # The agent hears the cancellation, never an answer.
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Closed)
        assert outcome.status == "cancelled"
        await agent.close()
