"""Pending actions of both kinds (the `kind` fixture) through the service, on SQLite and PostgreSQL: S03,
and an agent waiting again on a request it asked earlier (MCP `wait_for_answer`). S01, S15, S16 and
S22 for both kinds are in test_ask_and_respond.py."""

from __future__ import annotations

import asyncio

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState, ConflictReason
from backend.repository import turns
from backend.services.container import Services
from backend.services.pending.actions import TaskAdvanced
from backend.services.pending.core import trusted
from backend.services.resume import ResumeOutcome
from tests.lifecycle.support import (
    Kind,
    ScriptedResumer,
    all_metadata,
    decide,
    new_session,
    recording,
    rows,
    running,
)


async def state_of(svc: Services, pending_id: str) -> BundleState:
    bundle = await svc.pending.bundle(pending_id, authorize=trusted)
    assert bundle is not None
    return bundle.state


@pytest.mark.scenario("S03")
async def test_deleting_every_message_of_the_newer_turn_keeps_it_current_and_the_older_request_inert(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.pending.resumer = resumer
        older = await kind.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await older.outcome(), lc.Detached)
        history = await rows(db, older.pending_id)
        newer = await svc.operations.start_turn(session_id)
        posted = [
            await svc.operations.post_message(
                session_id, content=f"newer work {i}", author="agent", kind="message"
            )
            for i in range(2)
        ]
        assert {m.turn_id for m in posted} == {newer.id}
        for m in posted:
            assert await svc.operations.delete_message(m.id) is True
        page = await svc.reads.messages(session_id, first=None, after=None)
        assert not [m for m in page if m.turn_id == newer.id], "every message of the newer turn is gone"
        # The newer turn stays, open and current.
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == newer.id
        listed = await svc.reads.turns(session_id)
        assert listed[-1].id == newer.id
        assert listed[-1].completed_at is None
        # The older request is inert history: unchanged, never active again, it takes no answer.
        assert await rows(db, older.pending_id) == history
        assert await state_of(svc, older.pending_id) == BundleState.SUPERSEDED_HISTORY
        assert await kind.active(svc, [session_id]) == {}
        projection = (await svc.reads.pending_for_sessions([session_id]))[session_id]
        assert projection.current_turn_id == newer.id
        assert projection.pending_action is None
        late = await kind.answer(svc, older.pending_id)
        assert isinstance(late, lc.Conflict)
        assert late.reason == ConflictReason.SUPERSEDED
        assert resumer.claims == []
        advanced = await svc.pending.advance_task(task_id, "review", authorize=trusted)
        assert isinstance(advanced, TaskAdvanced)
        await older.close()


async def test_waiting_again_on_an_open_request_re_attaches_that_request_and_writes_no_new_row(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await agent.outcome(), lc.Detached)
        await agent.close()
        if kind.is_permission:
            # A rule that allows the very same call now exists (always-allowed as another tool use).
            other = await kind.ask(svc, session_id, tool_use_id="toolu_other")
            waiting = other.wait()
            assert isinstance(await decide(svc, other.pending_id, remember=True), lc.Responded)
            await waiting
            await other.close()
            assert len(await svc.permissions.rules(session_id, authorize=trusted)) == 1
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        before = [r["id"] for r in await all_metadata(db)]
        # A wait that runs out again: detached again, the same request, nothing new written.
        assert await svc.pending.wait_again(bundle, 0.05) == lc.Detached(agent.pending_id)
        assert [r["id"] for r in await all_metadata(db)] == before
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_DETACHED
        # A wait that gets the answer: the waiter holds that request, live, and receives it.
        waiting_again = asyncio.create_task(svc.pending.wait_again(bundle, 10))
        for _ in range(200):
            if await state_of(svc, agent.pending_id) == BundleState.ACTIVE_LIVE:
                break
            await asyncio.sleep(0.02)
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_LIVE
        assert [r["id"] for r in await all_metadata(db)] == before
        result = await kind.answer(svc, agent.pending_id)
        assert isinstance(result, lc.Responded)
        assert result.resumed is False
        assert await asyncio.wait_for(waiting_again, 10) == lc.Answered(
            agent.pending_id, kind.answers(bundle)
        )


async def test_waiting_again_on_a_request_no_longer_open_writes_nothing(db: Database, kind: Kind) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await agent.outcome(), lc.Detached)
        await agent.close()
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        # Newer work supersedes it after the agent read it, before it waits again: asking its
        # questions (or its tool call) again would write a new request in the new turn.
        await svc.operations.start_turn(session_id)
        before = await all_metadata(db)
        async with recording(svc) as log:
            assert await svc.pending.wait_again(bundle, 0.05) is None
        assert await all_metadata(db) == before
        assert log.events == []
        assert await kind.active(svc, [session_id]) == {}
