"""The pending-action scenarios whose clarification tests live in test_ask_and_respond.py (S01, S15, S16,
S22), for a permission request; and S03 for both kinds. Through the service, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState, ConflictReason
from backend.domain.permissions import Decision
from backend.repository import turns
from backend.services.bundles import trusted
from backend.services.clarifications import TaskAdvanceBlocked, TaskAdvanced
from backend.services.container import Services
from backend.services.resume import ResumeOutcome
from backend.services.uow import Work
from tests.lifecycle.support import (
    BASH,
    PERMISSION,
    Kind,
    ScriptedResumer,
    all_metadata,
    new_session,
    recording,
    rows,
    running,
)
from tests.resume.support import resuming, turn_rows

permission_only = pytest.mark.parametrize("kind", [PERMISSION], indirect=True, ids=str)


async def state_of(svc: Services, pending_id: str) -> BundleState:
    bundle = await svc.clarifications.bundle(pending_id, authorize=trusted)
    assert bundle is not None
    return bundle.state


@permission_only
@pytest.mark.scenario("S01")
async def test_a_request_whose_wait_runs_out_stays_visible_answerable_and_blocks_the_workflow(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.clarifications.resumer = resumer
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await agent.outcome(), lc.Detached)
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_DETACHED
        assert {r["agent_disconnected"] for r in await rows(db, agent.pending_id)} == {True}
        # Visible: the session advertises it, and it is the session's active request of its kind.
        projection = (await svc.reads.pending_for_sessions([session_id]))[session_id]
        assert projection.pending_action == kind.value.value
        assert (await kind.active(svc, [session_id]))[session_id].pending_id == agent.pending_id
        summary = (await svc.summaries.refresh([task_id]))[task_id]
        assert summary.pending_action == kind.value.value
        blocked = await svc.clarifications.advance_task(task_id, "review", authorize=trusted)
        assert isinstance(blocked, TaskAdvanceBlocked)
        assert blocked.session_id == session_id
        assert (await svc.reads.task(task_id)).workflow_step == "todo"
        # Answerable: the late decision resumes the agent with exactly that decision.
        result = await kind.answer(svc, agent.pending_id)
        assert isinstance(result, lc.Responded)
        assert result.resumed is True
        (claim,) = resumer.claims
        assert claim.answers == (Decision("allow", BASH),)
        await agent.close()


@permission_only
@pytest.mark.scenario("S15")
async def test_a_stale_browsers_allow_or_deny_gets_conflict_writes_nothing_and_resumes_nobody(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.clarifications.resumer = resumer
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        await svc.operations.start_turn(session_id)
        before = await all_metadata(db)
        async with recording(svc) as log:
            for respond in (kind.answer, kind.skip_or_deny):
                result = await respond(svc, agent.pending_id)
                assert isinstance(result, lc.Conflict)
                assert result.reason == ConflictReason.SUPERSEDED
                assert result.bundle is not None
                assert result.bundle.state == BundleState.SUPERSEDED_HISTORY
        assert await all_metadata(db) == before
        assert log.events == []
        assert resumer.claims == []
        await agent.close()


@permission_only
@pytest.mark.scenario("S16")
async def test_a_late_allow_the_resume_seam_refuses_keeps_the_request_answerable_and_a_retry_resumes_once(
    db: Database, kind: Kind
) -> None:
    # The real resume path (orchestrator, reservation, dispatch) with an executor that refuses once.
    async with resuming(db, ["rejected", "accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        before = await turn_rows(db, session_id)
        async with recording(svc) as log:
            result = await kind.answer(svc, agent.pending_id)
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is True
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_DETACHED
        stored = await rows(db, agent.pending_id)
        assert [r["status"] for r in stored] == ["pending"]
        assert not any("response" in r or "response_delivery_pending" in r for r in stored)
        # The restored row is published so other clients converge.
        assert log.kinds("message.updated") == [stored[0]["id"]]
        # The refused dispatch left no turn behind to supersede the request.
        assert await turn_rows(db, session_id) == before
        retry = await kind.answer(svc, agent.pending_id)
        assert isinstance(retry, lc.Responded)
        assert retry.resumed is True
        refused, accepted = executor.received
        assert refused.turn_id != accepted.turn_id
        assert accepted.pending_id == agent.pending_id
        assert "The user allowed it" in accepted.prompt
        assert "alembic upgrade head" in accepted.prompt
        turns_now = await turn_rows(db, session_id)
        assert [t["id"] for t in turns_now] == [before[0]["id"], accepted.turn_id]
        assert not any(k.startswith("prompt_dispatch_") for k in turns_now[1]["metadata"])
        answered = await rows(db, agent.pending_id)
        assert [(r["id"], r["status"]) for r in answered] == [(stored[0]["id"], "answered")]
        assert answered[0]["response"]["behavior"] == "allow"
        assert "response_delivery_pending" not in answered[0]
        await agent.close()


@permission_only
@pytest.mark.scenario("S22")
async def test_a_live_allow_is_durably_confirmed_before_the_agent_receives_it(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        order: list[str] = []
        agent.wait().add_done_callback(lambda _: order.append("agent received the decision"))
        # Hold the waiter's confirmation write until the test lets it go.
        entered, release = asyncio.Event(), asyncio.Event()
        finalize = svc.clarifications._finalize

        async def held(claim: lc.Claim) -> tuple[bool, Work]:
            entered.set()
            await release.wait()
            settled = await finalize(claim)
            order.append("confirmation committed")
            return settled

        monkeypatch.setattr(svc.clarifications, "_finalize", held)
        responding = asyncio.create_task(kind.answer(svc, agent.pending_id))
        await asyncio.wait_for(entered.wait(), 10)  # the hand-off reached the waiter
        (claimed,) = await rows(db, agent.pending_id)
        assert claimed["status"] == "answered"
        assert claimed.get("response_delivery_pending")
        await asyncio.sleep(0.1)  # the waiter holds the decision: it was enqueued, not confirmed
        assert order == []
        release.set()
        result = await responding
        assert isinstance(result, lc.Responded)
        assert result.resumed is False
        assert result.bundle.state == BundleState.TERMINAL
        outcome = await agent.outcome()
        assert order == ["confirmation committed", "agent received the decision"]
        assert isinstance(outcome, lc.Answered)
        assert outcome.answers == (Decision("allow", BASH),)
        (stored,) = await rows(db, agent.pending_id)
        assert stored["status"] == "answered"
        assert "response_delivery_pending" not in stored
        await agent.close()


@pytest.mark.scenario("S03")
async def test_deleting_every_message_of_the_newer_turn_keeps_it_current_and_the_older_request_inert(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.clarifications.resumer = resumer
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
        advanced = await svc.clarifications.advance_task(task_id, "review", authorize=trusted)
        assert isinstance(advanced, TaskAdvanced)
        await older.close()
