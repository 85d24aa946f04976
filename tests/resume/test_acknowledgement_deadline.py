"""S34: a detached answer the orchestrator does not acknowledge in time.

The decision (docs/architecture.md, "Admission deadline vs ambiguity"): silence BEFORE the attempt
marker is a failed admission (nothing left the process: roll back, restore, retryable); silence
AFTER it is ambiguous (the agent may be running the prompt: the answer stays terminal and is never
sent again, not even after a restart).
"""

from __future__ import annotations

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import INTENT_KEY, BundleState, ConflictReason
from backend.executors.scripted import ScriptedExecutor
from backend.repository import locks, reservations, turns
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, recording, rows, yes
from tests.resume.support import (
    GatedExecutor,
    answered_in_prompt,
    detached_question,
    detached_request,
    eventually,
    resuming,
    turn_rows,
)


@pytest.mark.scenario("S34")
async def test_silence_before_the_attempt_marker_is_a_failed_admission_that_restores_the_answer(
    db: Database, kind: Kind
) -> None:
    executor = ScriptedExecutor(["accepted"])
    async with resuming(db, executor=executor, persistence_seconds=0.6) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        source_turn = agent.turn_id
        # Another server process holds an unresolved reservation of the session: this orchestrator
        # cannot admit the prompt, so it stays silent until its bounded admission deadline.
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            await reservations.reserve(
                conn,
                session_id,
                turn_id="held-elsewhere",
                source_turn_id=source_turn,
                pending_id="other",
                message_ids=["m-other"],
                claim_id=None,
                origin="detached",
            )
        before = await turn_rows(db, session_id)
        async with recording(svc) as log:
            failed = await kind.answer(svc, agent.pending_id, agent.bundle)
            await eventually(lambda: len(log.kinds("message.updated")) >= 1)
        # Acceptance failed: a retryable error, nothing reached the executor, no successor of ours.
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is True
        assert "in time" in failed.message
        assert executor.received == []
        assert await turn_rows(db, session_id) == before
        # The still-current bundle is restored: pending, no answer, no intent, answerable.
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        assert bundle.turn_id == source_turn == bundle.current_turn_id
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"pending"}
        assert not any(INTENT_KEY in r or "response" in r for r in stored)
        # The restored rows were published (no terminal event was).
        assert log.kinds("message.updated") == [r["id"] for r in stored]
        # Once the other reservation resolves, the same answer goes through exactly once.
        async with db.write() as conn:
            await reservations.delete_unpublished(conn, "held-elsewhere")
        retry = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(retry, lc.Responded)
        assert retry.resumed is True
        assert len(executor.received) == 1
        assert answered_in_prompt(kind) in executor.received[0].prompt
        await agent.close()


# The admission-deadline decision: after the attempt marker, silence is ambiguous, not a restore.
@pytest.mark.scenario_note("S34", "ambiguous")
async def test_silence_after_the_attempt_marker_is_ambiguous_terminal_and_never_sent_again(
    db: Database,
) -> None:
    gate = GatedExecutor()  # takes the prompt and never answers
    async with resuming(db, executor=gate, dispatch_seconds=0.2) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        source_turn = agent.bundle.turn_id  # type: ignore[union-attr]
        async with recording(svc) as log:
            failed = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
            await eventually(lambda: any(e["type"] == "turn.started" for e in log.events))
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is False
        assert "not sent again" in failed.message
        (request,) = gate.received
        assert gate.cancelled, "the silent dispatch was abandoned at its deadline"
        # The successor stays current (the agent may be running it) and its start was published.
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == request.turn_id
        assert [t["id"] for t in await turn_rows(db, session_id)] == [source_turn, request.turn_id]
        assert [e["turn_id"] for e in log.events if e["type"] == "turn.started"] == [request.turn_id]
        # The answer stays terminal, its intent retired: a retry is a conflict, not a second prompt.
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"answered"}
        assert not any(INTENT_KEY in r for r in stored)
        again = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(again, lc.Conflict)
        assert again.reason == ConflictReason.TERMINAL
        assert len(gate.received) == 1
        await agent.close()
    # Not even a restart re-sends it: recovery keeps the successor and the terminal answer.
    async with resuming(db, ["accepted"]) as (restarted, executor):
        await restarted.recovery.run()
        await restarted.resume_recovery.replay_outbox()
        assert executor.received == []
        bundle = await restarted.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.TERMINAL
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"answered"}
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == request.turn_id
