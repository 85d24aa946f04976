"""Detached answers resume the agent exactly once: reservation, attempt marker, dispatch, publication."""

from __future__ import annotations

import asyncio

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.errors import TurnwiseError
from backend.domain.lifecycle import BundleState
from backend.executors.scripted import ScriptedExecutor
from backend.repository import locks, reservations, turns
from backend.services.dispatch import Origin
from backend.services.pending.core import trusted
from backend.services.resume import ResumeOutcome
from tests.lifecycle.support import Kind, new_session, questions, recording, rows, yes
from tests.resume.support import (
    GatedExecutor,
    detached_question,
    detached_request,
    eventually,
    faulty,
    resuming,
    turn_rows,
)
from tests.resume.test_stale_ready_events import Watching


async def test_detached_answer_succeeds_only_after_one_accepted_resume_and_publishes_a_clean_successor(
    db: Database,
) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id, questions(2))
        source_turn = agent.bundle.turn_id  # type: ignore[union-attr]
        async with recording(svc) as log:
            result = await svc.pending.respond(
                agent.pending_id, yes("q1", "q2"), rejected=False, authorize=trusted
            )
            await eventually(lambda: any(e["type"] == "turn.started" for e in log.events))
        assert isinstance(result, lc.Responded)
        assert result.resumed is True
        assert len(executor.received) == 1
        request = executor.received[0]
        assert "Question 1?" in request.prompt
        assert "Question 2?" in request.prompt
        assert "yes" in request.prompt
        assert request.generation == request.turn_id
        assert request.pending_id == agent.pending_id
        stored = await turn_rows(db, session_id)
        assert [t["id"] for t in stored] == [source_turn, request.turn_id]
        # Published: no private key is left on the successor, and it is visible and current.
        assert not any(k.startswith("prompt_dispatch_") for k in stored[1]["metadata"])
        assert [t.id for t in await svc.reads.turns(session_id)] == [source_turn, request.turn_id]
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == request.turn_id
        answered = await rows(db, agent.pending_id)
        assert {r["status"] for r in answered} == {"answered"}
        assert not any("response_delivery_pending" in r for r in answered)
        started = [e for e in log.events if e["type"] == "turn.started"]
        assert [e["turn_id"] for e in started] == [request.turn_id]
        # Public events carry ids only: nothing private leaks into any of them.
        assert "prompt_dispatch" not in repr(log.events)
        await agent.close()


@pytest.mark.scenario("S16")
async def test_detached_answer_not_accepted_returns_retryable_error_and_a_retry_delivers_exactly_once(
    db: Database, kind: Kind
) -> None:
    # The prompt channel with no runner queues the answer instead (tests/resume/test_inbox.py).
    async with resuming(db, ["rejected", "accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        before = await turn_rows(db, session_id)
        failed = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is True
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        # No failed-dispatch turn supersedes the bundle.
        assert await turn_rows(db, session_id) == before
        svc.orchestrator.executor = executor
        executor.outcomes = ["accepted"]
        retry = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(retry, lc.Responded)
        assert retry.resumed is True
        # The durable record, not the script: the refused turn is gone, the accepted one is current.
        refused, accepted = executor.received
        stored = [t["id"] for t in await turn_rows(db, session_id)]
        assert stored == [before[0]["id"], accepted.turn_id]
        assert refused.turn_id not in stored
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == accepted.turn_id
        await agent.close()


@pytest.mark.scenario("S16")
async def test_attempt_marker_failure_rejects_before_dispatch_and_the_answer_stays_retryable(
    db: Database, kind: Kind
) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        before = await turn_rows(db, session_id)
        async with faulty("resume.attempt_marker"):
            failed = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is True
        assert executor.received == []
        assert await turn_rows(db, session_id) == before
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"pending"}
        retry = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(retry, lc.Responded)
        assert len(executor.received) == 1
        await agent.close()


@pytest.mark.scenario("S17", "S18")
async def test_accepted_answer_whose_publication_fails_is_non_retryable_terminal_and_never_rolled_back(
    db: Database, kind: Kind
) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        async with faulty("resume.publish"):
            failed = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is False
        assert len(executor.received) == 1
        successor = executor.received[0].turn_id
        answered = await rows(db, agent.pending_id)
        assert {r["status"] for r in answered} == {"answered"}
        assert not any("response_delivery_pending" in r for r in answered)
        # Normal failure cleanup: the successor stays, its start event waits in the durable outbox.
        stored = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
        assert stored[successor] == {reservations.START_EVENT_PENDING: True}
        # The accepted turn is remembered: a later rollback fails closed, nothing is re-dispatched.
        assert await svc.orchestrator.rollback_reservation(session_id, successor) is False
        assert successor in {t["id"] for t in await turn_rows(db, session_id)}
        conflict = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(conflict, lc.Conflict)
        assert len(executor.received) == 1
        async with recording(svc) as log:
            assert await svc.resume_recovery.replay_outbox() == 1
            await eventually(lambda: any(e["type"] == "turn.started" for e in log.events))
        assert [e["turn_id"] for e in log.events if e["type"] == "turn.started"] == [successor]
        assert {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}[successor] == {}
        await agent.close()


@pytest.mark.parametrize("outcome", ["ambiguous", "hang"])
# The admission-deadline decision: after the attempt marker, silence is ambiguous, not a restore.
@pytest.mark.scenario_note("S34", "ambiguous")
async def test_dispatch_sent_but_not_acknowledged_is_non_retryable_keeps_the_successor_and_is_never_resent(
    db: Database, outcome: str
) -> None:
    async with resuming(db, [outcome], dispatch_seconds=0.2) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        failed = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is False
        successor = executor.received[0].turn_id
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == successor
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.TERMINAL
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"answered"}
        assert isinstance(
            await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted),
            lc.Conflict,
        )
        assert len(executor.received) == 1
        await agent.close()


@pytest.mark.scenario("S29")
async def test_failed_rollback_keeps_the_reservation_unresolved_and_blocks_admission_until_restart_recovery(
    db: Database, kind: Kind
) -> None:
    async with resuming(db, ["rejected"], dispatch_seconds=0.3, persistence_seconds=1.0) as (svc, executor):
        _, session_id = await new_session(svc)
        first = await detached_request(svc, session_id, kind)
        predecessor = first.turn_id
        async with faulty("resume.rollback"):
            failed = await kind.answer(svc, first.pending_id, first.bundle)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is False
        assert svc.orchestrator.quarantined(session_id)
        reserved = executor.received[0].turn_id
        # Another answer in that session cannot enter: admission stays closed (and stays retryable).
        second = await detached_request(svc, session_id, kind)
        blocked = await kind.answer(svc, second.pending_id, second.bundle)
        assert isinstance(blocked, lc.DeliveryFailed)
        assert blocked.retryable is True
        assert len(executor.received) == 1
        # Ready handling waits on the unresolved reservation and gives up without touching state.
        with pytest.raises(Exception, match="unresolved"):
            await svc.operations.complete_turn(predecessor, predecessor)
        assert not next(t for t in await turn_rows(db, session_id) if t["id"] == predecessor)["completed"]
        await first.close()
        await second.close()
    async with resuming(db, ["accepted"]) as (restarted, _):
        await restarted.recovery.run()
        await restarted.resume_recovery.replay_outbox()
        # The reservation was attempted (the prompt may be running): it survives as a published turn.
        stored = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
        assert stored[reserved] == {}
        assert not restarted.orchestrator.quarantined(session_id)


@pytest.mark.scenario("S34")
async def test_admission_that_cannot_happen_before_its_deadline_fails_retryable_and_restores(
    db: Database, kind: Kind
) -> None:
    async with resuming(db, ["accepted"], persistence_seconds=0.8) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        # Another server process holds an unresolved reservation of the session.
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            await reservations.reserve(
                conn,
                session_id,
                turn_id="elsewhere",
                source_turn_id=agent.turn_id,
                pending_id="other",
                message_ids=["m-other"],
                claim_id=None,
                origin="detached",
            )
        failed = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is True
        assert executor.received == []
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"pending"}
        await agent.close()


@pytest.mark.scenario("S25")
async def test_prompt_admission_rejects_a_superseded_clarification_turn(db: Database, kind: Kind) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        assert agent.bundle is not None
        stale_turn = agent.turn_id
        await svc.operations.start_turn(session_id)
        before = await turn_rows(db, session_id)
        claim = lc.Claim(
            claim_id="settled-by-the-waiter",
            pending_id=agent.pending_id,
            session_id=session_id,
            task_id=agent.bundle.task_id,
            turn_id=stale_turn,
            message_ids=(agent.bundle.rows[0].id,),
            answers=tuple(kind.answers(agent.bundle)),
            rejected=False,
        )
        outcome = await svc.orchestrator.dispatch_answer(claim, Origin.WATCHDOG)
        assert outcome == ResumeOutcome(False, True, "the clarification's turn is no longer current")
        assert executor.received == []
        assert await turn_rows(db, session_id) == before
        await agent.close()


# --- ready events -------------------------------------------------------------------------------


async def _overlapping_ready_event(
    db: Database, kind: Kind, outcome: str, generation: str | None
) -> tuple[BaseException | None, bool, list[str]]:
    """A predecessor's completeTurn arrives while its successor's dispatch is in flight."""
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        predecessor = agent.turn_id
        respond = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
        await asyncio.wait_for(gate.started.wait(), 5)
        assert svc.operations.reservations is not None
        watching = svc.operations.reservations = Watching(svc.operations.reservations)
        ready = asyncio.create_task(
            svc.operations.complete_turn(predecessor, predecessor if generation == "own" else generation)
        )
        await asyncio.wait_for(watching.waiting.wait(), 5)
        gate.release(outcome)
        await respond
        error: BaseException | None = None
        try:
            await ready
        except TurnwiseError as exc:
            error = exc
        # It arrived while the dispatch was held, so it waited for the reservation's outcome.
        assert watching.overlapped[0] is True, "the ready event must wait for the live reservation"
        stored = await turn_rows(db, session_id)
        completed = [t["id"] for t in stored if t["completed"]]
        await agent.close()
        return error, predecessor in completed, completed


@pytest.mark.scenario("S28")
async def test_ready_event_waits_for_the_reservation_and_a_superseded_generation_cannot_complete_anything(
    db: Database, kind: Kind
) -> None:
    error, predecessor_completed, completed = await _overlapping_ready_event(db, kind, "accepted", "own")
    assert error is not None
    assert getattr(error, "code", "") == "STALE_GENERATION"
    # The accepted successor ended its predecessor when it was published; the stale ready event
    # itself completed nothing: the successor is still open.
    assert predecessor_completed
    assert len(completed) == 1


@pytest.mark.scenario("S28")
async def test_ready_event_whose_generation_still_owns_the_session_after_rollback_completes_normally(
    db: Database, kind: Kind
) -> None:
    error, predecessor_completed, _ = await _overlapping_ready_event(db, kind, "rejected", "own")
    assert error is None
    assert predecessor_completed


@pytest.mark.scenario("S31")
async def test_generationless_ready_event_overlapping_a_reservation_is_dropped_after_rollback(
    db: Database, kind: Kind
) -> None:
    error, predecessor_completed, completed = await _overlapping_ready_event(db, kind, "rejected", None)
    assert error is not None
    assert getattr(error, "code", "") == "STALE_GENERATION"
    assert completed == []
    assert not predecessor_completed


async def test_the_resumed_agent_completes_its_own_turn_with_the_generation_it_was_given(
    db: Database,
) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        request = executor.received[0]
        done = await svc.operations.complete_turn(request.turn_id, request.generation)
        assert done.completed_at is not None
        await agent.close()


def test_executor_is_chosen_by_settings() -> None:
    from backend.config import Settings
    from backend.executors.webhook import WebhookExecutor
    from backend.services.container import executor_for

    prompts = object()
    assert executor_for(Settings(), prompts) is prompts  # type: ignore[arg-type]
    hook = executor_for(Settings(executor="webhook", webhook_url="http://127.0.0.1:9/x"), prompts)  # type: ignore[arg-type]
    assert isinstance(hook, WebhookExecutor)
    scripted = executor_for(Settings(executor="scripted", scripted_outcomes=("rejected",)), prompts)  # type: ignore[arg-type]
    assert isinstance(scripted, ScriptedExecutor)
    assert scripted.outcomes == ["rejected"]
    with pytest.raises(ValueError, match="TURNWISE_WEBHOOK_URL"):
        executor_for(Settings(executor="webhook"), prompts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channel, webhook or scripted"):
        executor_for(Settings(executor="carrier-pigeon"), prompts)  # type: ignore[arg-type]
