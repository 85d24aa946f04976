"""Concurrency, cancel/expire, workflow guard and startup recovery, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from backend import faults
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import Answer, BundleState, ConflictReason
from backend.domain.permissions import Decision
from backend.domain.states import SessionState
from backend.repository import claims, locks
from backend.services.pending.actions import TaskAdvanceBlocked, TaskAdvanced
from backend.services.pending.core import trusted
from tests.lifecycle.support import (
    Agent,
    Kind,
    new_session,
    questions,
    recording,
    rows,
    running,
    yes,
)
from tests.resume.support import resuming

COMMIT_REPLY_LOST = "respond.commit_reply_lost"


async def test_fifty_concurrent_responders_to_one_bundle_exactly_one_succeeds(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        agent.wait()
        results = await asyncio.gather(
            *(
                svc.pending.respond(
                    agent.pending_id,
                    [Answer("q1", (f"q1_opt{1 + i % 2}",), None)],
                    rejected=False,
                    authorize=trusted,
                )
                for i in range(50)
            )
        )
        winners = [r for r in results if isinstance(r, lc.Responded)]
        conflicts = [r for r in results if isinstance(r, lc.Conflict)]
        assert len(winners) == 1
        assert len(conflicts) == 49
        # Losers that ran before the waiter's confirmation see the claim; later ones a terminal bundle.
        assert {c.reason for c in conflicts} <= {ConflictReason.DELIVERY_CLAIMED, ConflictReason.TERMINAL}
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Answered)
        winner_answer = winners[0].bundle.rows[0].metadata["response"]["selected_option_ids"]
        assert list(outcome.question_answers[0].selected_option_ids) == winner_answer
        await agent.close()


async def test_a_turn_started_while_a_live_claim_is_in_flight_keeps_the_answer_terminal(db: Database) -> None:
    async with running(db, live_confirmation_seconds=0.5) as svc:
        _, session_id = await new_session(svc)
        # The agent asked but does not consume the hand-off: delivery stays unconfirmed.
        agent = await Agent.ask(svc, session_id)
        responding = asyncio.create_task(
            svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        )
        for _ in range(200):
            if any(r.get("response_delivery_pending") for r in await rows(db, agent.pending_id)):
                break
            await asyncio.sleep(0.01)
        await svc.operations.start_turn(session_id)
        result = await responding
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is False
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"answered"}
        assert not any(r.get("response_delivery_pending") for r in stored)
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.TERMINAL
        await agent.close()


@pytest.mark.scenario("S23")
async def test_unconfirmed_live_delivery_restores_exactly_the_claimed_rows_while_current(
    db: Database, kind: Kind
) -> None:
    async with running(db, live_confirmation_seconds=0.3) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        result = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is True
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"pending"}
        assert not any("response" in r or "response_delivery_pending" in r for r in stored)
        # The waiter never confirmed, so it no longer counts as live: the next answer is detached.
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        await agent.close()


async def test_a_live_claim_whose_commit_reply_was_lost_is_restored_still_attached_to_its_waiter(
    db: Database, kind: Kind
) -> None:
    """The claim's COMMIT took effect but its reply never came (the database went away in between):
    the person is told to retry, the claim comes back once the database answers, and the agent, which
    waited through it all, is still the one the retry hands the answer to. Restoring it detached
    would end the waiting agent's ask (`Detached`) although nothing happened to it."""
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        agent.wait()
        faults.configure([COMMIT_REPLY_LOST])
        try:
            lost = await kind.answer(svc, agent.pending_id)
        finally:
            faults.configure([])
        assert isinstance(lost, lc.DeliveryFailed), lost
        assert lost.retryable is True
        for _ in range(300):  # the restorer's first probe comes after 0.1 s
            if {r["status"] for r in await rows(db, agent.pending_id)} == {"pending"}:
                break
            await asyncio.sleep(0.02)
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_LIVE, bundle.state
        await asyncio.sleep(0.2)  # the restore's events reached the waiter: it still waits
        assert agent.waiting is not None
        assert not agent.waiting.done()
        again = await kind.answer(svc, agent.pending_id)
        assert isinstance(again, lc.Responded), again
        assert again.resumed is False
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Answered), outcome  # an ALLOW reaches a waiting agent as its answer
        assert {r["status"] for r in await rows(db, agent.pending_id)} != {"pending"}
        await agent.close()


async def test_detach_racing_an_answer_never_overwrites_it(db: Database) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        for _ in range(5):
            _, session_id = await new_session(svc)
            agent = await Agent.ask(svc, session_id)
            agent.wait()
            async with recording(svc) as log:
                detached, result = await asyncio.gather(
                    svc.pending.detach_session(session_id),
                    svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted),
                )
            # Whichever came first, the answer is kept and reaches the agent exactly once.
            assert isinstance(result, lc.Responded)
            stored = await rows(db, agent.pending_id)
            assert stored[0]["status"] == "answered"
            assert "response_delivery_pending" not in stored[0]
            resumes = [r for r in executor.received if r.pending_id == agent.pending_id]
            outcome = await agent.outcome()
            if result.resumed:  # the detach came first: the answer took the detached (resume) path
                assert len(resumes) == 1
                assert stored[0]["agent_disconnected"] is True
                assert isinstance(outcome, lc.Detached | lc.Closed)
            else:  # the live hand-off came first: the waiter has it, nothing is resumed
                assert resumes == []
                assert isinstance(outcome, lc.Answered)
            # Only rows the detach really changed were published as detached.
            assert detached in (0, 1)
            assert log.kinds("message.updated").count(stored[0]["id"]) <= 2
            await agent.close()


@pytest.mark.scenario("S23")
async def test_restore_racing_a_late_confirmation_lets_exactly_one_win(db: Database, kind: Kind) -> None:
    async with running(db) as svc:
        for i in range(10):
            _, session_id = await new_session(svc)
            agent = await kind.ask(svc, session_id, qs=questions(2))
            bundle = agent.bundle
            assert bundle is not None
            ids = [r.id for r in bundle.rows]
            async with db.write() as conn:
                await locks.lock_sessions(conn, [session_id])
                claimed = await claims.claim(
                    conn,
                    session_id=session_id,
                    pending_id=agent.pending_id,
                    message_ids=ids,
                    answers=kind.answers_by_row(bundle),
                    rejected=False,
                    claim_id=f"claim{i}",
                    detach_rows=False,
                )
            assert len(claimed) == len(ids) == (1 if kind.is_permission else 2)

            async def finalize(sid: str = session_id, ids: list[str] = ids, claim: str = f"claim{i}") -> int:
                async with db.write() as conn:
                    await locks.lock_sessions(conn, [sid])
                    return len(await claims.settle_claim(conn, ids, claim))

            async def restore(sid: str = session_id, ids: list[str] = ids, claim: str = f"claim{i}") -> int:
                async with db.write() as conn:
                    await locks.lock_sessions(conn, [sid])
                    return len(await claims.restore_claim(conn, sid, ids, claim, detach_rows=True))

            won = (
                await asyncio.gather(finalize(), restore())
                if i % 2
                else await asyncio.gather(restore(), finalize())
            )
            assert sorted(won) == [0, len(ids)], won
            stored = await rows(db, agent.pending_id)
            assert len({r["status"] for r in stored}) == 1
            assert not any(r.get("response_delivery_pending") for r in stored)
            await agent.close()


async def test_partial_bundle_claims_only_pending_siblings_and_keeps_terminal_ones(db: Database) -> None:
    async with resuming(db, ["accepted"], live_confirmation_seconds=0.3) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(2))
        bundle = agent.bundle
        assert bundle is not None
        # A historical per-row failure left q1 answered and q2 pending.
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            await claims.claim(
                conn,
                session_id=session_id,
                pending_id=agent.pending_id,
                message_ids=[bundle.rows[0].id],
                answers={"q1": yes("q1")[0]},
                rejected=False,
                claim_id=None,
                detach_rows=False,
            )
        before_q1 = (await rows(db, agent.pending_id))[0]
        failed = await svc.pending.respond(agent.pending_id, yes("q2"), rejected=False, authorize=trusted)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable
        after = await rows(db, agent.pending_id)
        assert after[0] == before_q1
        assert after[1]["status"] == "pending"
        # Detached now: the retry resumes the agent with the pending sibling only.
        ok = await svc.pending.respond(agent.pending_id, yes("q2"), rejected=False, authorize=trusted)
        assert isinstance(ok, lc.Responded)
        assert ok.resumed is True
        (request,) = executor.received
        assert "Question 2?" in request.prompt
        assert "Question 1?" not in request.prompt
        final = await rows(db, agent.pending_id)
        assert final[0] == before_q1
        assert final[1]["status"] == "answered"
        assert "response_delivery_pending" not in final[1]
        await agent.close()


async def test_cancel_of_a_live_request_ends_its_waiter_and_touches_no_other_bundle(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        first = await Agent.ask(svc, session_id, questions(1))
        second = await Agent.ask(svc, session_id, questions(2))
        first.wait()
        assert await svc.pending.cancel(first.pending_id, authorize=trusted) is True
        outcome = await first.outcome()
        assert isinstance(outcome, lc.Closed)
        assert outcome.status == "cancelled"
        assert {r["status"] for r in await rows(db, first.pending_id)} == {"cancelled"}
        assert {r["status"] for r in await rows(db, second.pending_id)} == {"pending"}
        assert await svc.pending.cancel(first.pending_id, authorize=trusted) is False
        active = await svc.pending.active_bundles([session_id])
        assert active[session_id].pending_id == second.pending_id
        await first.close()
        await second.close()


async def test_cancel_of_a_detached_request_is_refused_without_a_write(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        before = await rows(db, agent.pending_id)
        assert await svc.pending.cancel(agent.pending_id, authorize=trusted) is False
        assert await rows(db, agent.pending_id) == before
        await agent.close()


@pytest.mark.scenario("S33")
async def test_session_entering_a_terminal_state_expires_current_turn_bundles_before_publishing(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, qs=questions(2))
        agent.wait()
        async with recording(svc) as log:
            await svc.operations.set_session_state(session_id, SessionState.COMPLETED)
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Closed)
        assert outcome.status == "expired"
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"expired"}
        kinds = [e["type"] for e in log.events]
        assert kinds.index("session.state") > max(i for i, k in enumerate(kinds) if k == "message.updated")
        late = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(late, lc.Conflict)
        assert late.reason == ConflictReason.TERMINAL
        await agent.close()


@pytest.mark.scenario("S01", "S02")
async def test_workflow_guard_blocks_on_an_active_question_and_never_on_an_older_turn(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        task_id, _ = await new_session(svc)
        secondary = await svc.operations.create_session(task_id, is_primary=False, input_capable=True)
        await svc.operations.start_turn(secondary.id)
        agent = await kind.ask(svc, secondary.id, timeout_seconds=0.05)
        await agent.outcome()
        blocked = await svc.pending.advance_task(task_id, "review", authorize=trusted)
        assert isinstance(blocked, TaskAdvanceBlocked)
        assert blocked.session_id == secondary.id
        assert (await svc.reads.task(task_id)).workflow_step == "todo"
        await svc.operations.start_turn(secondary.id)  # the question is now older-turn history
        advanced = await svc.pending.advance_task(task_id, "review", authorize=trusted)
        assert isinstance(advanced, TaskAdvanced)
        assert advanced.task.workflow_step == "review"
        await agent.close()


async def test_workflow_guard_fails_closed_when_the_active_state_read_fails(db: Database) -> None:
    async with running(db) as svc:
        task_id, _ = await new_session(svc)
        faults.configure(["workflow_guard_read"])
        try:
            result = await svc.pending.advance_task(task_id, "review", authorize=trusted)
        finally:
            faults.configure([])
        assert isinstance(result, TaskAdvanceBlocked)
        assert result.session_id is None
        assert (await svc.reads.task(task_id)).workflow_step == "todo"


async def _stranded_claim(
    db: Database,
    session_id: str,
    pending_id: str,
    ids: list[str],
    answers: Mapping[str, Answer | Decision] | None = None,
) -> None:
    async with db.write() as conn:
        await locks.lock_sessions(conn, [session_id])
        claimed = await claims.claim(
            conn,
            session_id=session_id,
            pending_id=pending_id,
            message_ids=ids,
            answers={"q1": yes("q1")[0]} if answers is None else answers,
            rejected=False,
            claim_id="stranded",
            detach_rows=False,
        )
    assert claimed


@pytest.mark.scenario("S21")
async def test_startup_restores_an_unhanded_current_turn_claim_and_the_same_answer_can_be_submitted_again(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        bundle = agent.bundle
        assert bundle is not None
        await _stranded_claim(
            db, session_id, agent.pending_id, [bundle.rows[0].id], dict(kind.answers_by_row(bundle))
        )
        await agent.stream.aclose()  # the process "died": its waiter is gone
    async with running(db) as restarted:
        assert await restarted.recovery.recover_delivery_intents() == (1, 0)
        assert await restarted.recovery.detach_orphaned_waiters() == 1
        stored = await rows(db, agent.pending_id)
        assert stored[0]["status"] == "pending"
        assert "response_delivery_pending" not in stored[0]
        bundle = await restarted.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        # The agent reconnects and asks again: same bundle, live again, and the answer arrives.
        again = await kind.ask(restarted, session_id)
        assert again.pending_id == agent.pending_id
        again.wait()
        assert isinstance(await kind.answer(restarted, again.pending_id, again.bundle), lc.Responded)
        answered = await again.outcome()
        assert isinstance(answered, lc.Answered)
        assert answered.answers == kind.answers(bundle)
        await again.close()


async def test_startup_retires_the_intent_of_a_superseded_or_terminal_claim(db: Database) -> None:
    async with running(db) as svc:
        _, superseded = await new_session(svc)
        _, finished = await new_session(svc)
        agents = [await Agent.ask(svc, s) for s in (superseded, finished)]
        for s, a in zip((superseded, finished), agents, strict=True):
            await _stranded_claim(db, s, a.pending_id, [a.bundle.rows[0].id])  # type: ignore[union-attr]
            await a.stream.aclose()
        await svc.operations.start_turn(superseded)
        await svc.operations.set_session_state(finished, SessionState.FAILED)
        assert await svc.recovery.recover_delivery_intents() == (0, 2)
        assert await svc.recovery.recover_delivery_intents() == (0, 0)
        for a in agents:
            stored = await rows(db, a.pending_id)
            assert stored[0]["status"] == "answered"
            assert "response_delivery_pending" not in stored[0]
            bundle = await svc.pending.bundle(a.pending_id, authorize=trusted)
            assert bundle is not None
            assert bundle.state == BundleState.TERMINAL
