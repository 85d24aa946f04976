"""Startup recovery: reservations first, then delivery intents, then the start-event outbox."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from backend.db.engine import Database
from backend.db.sqlfuncs import json_update
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_session_turns as T
from backend.domain.lifecycle import BundleState
from backend.repository import claims, locks, messages, reservations, turns
from backend.services.container import Services
from backend.services.pending.core import trusted
from backend.services.recovery import RecoveryFailed
from tests.lifecycle.support import CLARIFICATION, Kind, new_session, questions, recording, rows
from tests.resume.support import (
    detached_request,
    eventually,
    faulty,
    resuming,
    turn_rows,
)


async def strand(
    svc: Services,
    db: Database,
    session_id: str,
    *,
    qs: int = 1,
    attempted: Any = None,
    evidence: bool = False,
    terminal_sibling: bool = False,
    metadata: dict[str, Any] | None = None,
    kind: Kind = CLARIFICATION,
) -> tuple[str, str, list[str]]:
    """The durable state a crash leaves between claim+reservation and the next step:
    (pending id, reservation turn id, claimed message ids). A permission request has one row: `qs`
    is for questions."""
    agent = await detached_request(svc, session_id, kind, questions(qs))
    bundle = agent.bundle
    assert bundle is not None
    assert bundle.turn_id is not None
    ids = [r.id for r in bundle.rows]
    async with db.write() as conn:
        await locks.lock_sessions(conn, [session_id])
        if terminal_sibling:
            # Answered by an earlier partial write: not part of this claim, never restored.
            await conn.execute(update(M).where(M.c.id == ids[0]).values(status="answered"))
            ids = ids[1:]
        claimed = await claims.claim(
            conn,
            session_id=session_id,
            pending_id=bundle.pending_id,
            message_ids=ids,
            answers=kind.answers_by_row(bundle),
            rejected=False,
            claim_id="claim-1",
            detach_rows=True,
        )
        assert sorted(r.id for r in claimed) == sorted(ids)
        turn = await reservations.reserve(
            conn,
            session_id,
            turn_id=f"reserved-{session_id}",
            source_turn_id=bundle.turn_id,
            pending_id=bundle.pending_id,
            message_ids=ids,
            claim_id="claim-1",
            origin="detached",
        )
        extra: dict[str, Any] = dict(metadata or {})
        if attempted is not None:
            extra[reservations.ATTEMPTED] = attempted
        if extra:
            await conn.execute(
                update(T).where(T.c.id == turn.id).values(metadata=json_update(T.c.metadata, extra))
            )
        if evidence:
            await messages.insert_message(
                conn,
                session_id=session_id,
                turn_id=turn.id,
                kind="message",
                author="agent",
                content="working on it",
                metadata={},
            )
    await agent.close()
    return bundle.pending_id, turn.id, ids


@pytest.mark.scenario("S19")
async def test_startup_deletes_an_empty_reservation_and_restores_exactly_its_claimed_rows(
    db: Database, kind: Kind
) -> None:
    # A permission request has no sibling rows: its one row is the claim.
    siblings = not kind.is_permission
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc)
        pending_id, reserved, claimed = await strand(
            svc, db, session_id, qs=3, terminal_sibling=siblings, kind=kind
        )
    async with resuming(db) as (restarted, _):
        async with recording(restarted) as log:
            await restarted.recovery.run()
            await eventually(lambda: len(log.kinds("message.updated")) >= len(claimed))
        assert reserved not in {t["id"] for t in await turn_rows(db, session_id)}
        stored = {r["id"]: r for r in await rows(db, pending_id)}
        assert [stored[i]["status"] for i in claimed] == ["pending"] * (2 if siblings else 1)
        assert not any("response" in stored[i] or "response_delivery_pending" in stored[i] for i in claimed)
        if siblings:
            sibling = next(r for i, r in stored.items() if i not in claimed)
            assert sibling["status"] == "answered"
        assert sorted(log.kinds("message.updated")) == sorted(claimed)
        bundle = await restarted.pending.bundle(pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED


@pytest.mark.parametrize("marker", [True, "true", "1", 1])
@pytest.mark.scenario("S20", "S30", "S36")
async def test_startup_preserves_an_attempted_reservation_in_any_marker_form_and_replays_its_start(
    db: Database, marker: Any, kind: Kind
) -> None:
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc)
        pending_id, reserved, _ = await strand(svc, db, session_id, attempted=marker, kind=kind)
    async with resuming(db) as (restarted, _):
        await restarted.recovery.run()
        after_step_1 = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
        assert after_step_1[reserved] == {reservations.START_EVENT_PENDING: True}
        stored = await rows(db, pending_id)
        assert [r["status"] for r in stored] == ["answered"]
        assert "response_delivery_pending" not in stored[0]
        async with recording(restarted) as log:
            assert await restarted.resume_recovery.replay_outbox() == 1
            await eventually(lambda: len(log.events) >= 1)
        assert [(e["type"], e["turn_id"]) for e in log.events] == [("turn.started", reserved)]
        assert {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}[reserved] == {}
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == reserved
        assert reserved in [t.id for t in await restarted.reads.turns(session_id)]


@pytest.mark.scenario("S20")
async def test_startup_preserves_a_message_backed_reservation_without_an_attempt_marker(
    db: Database, kind: Kind
) -> None:
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc)
        pending_id, reserved, _ = await strand(svc, db, session_id, evidence=True, kind=kind)
    async with resuming(db) as (restarted, _):
        await restarted.recovery.run()
        assert {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}[reserved] == {
            reservations.START_EVENT_PENDING: True
        }
        assert [r["status"] for r in await rows(db, pending_id)] == ["answered"]


@pytest.mark.parametrize(
    "broken",
    [
        {reservations.SOURCE_MESSAGE_IDS: [1]},
        {reservations.SOURCE_MESSAGE_IDS: [""]},
        {reservations.SOURCE_MESSAGE_IDS: "m1"},
        {reservations.SOURCE_MESSAGE_IDS: []},
        {reservations.SOURCE_PENDING_ID: ""},
        {reservations.SOURCE_TURN_ID: None},
    ],
)
@pytest.mark.scenario("S37")
async def test_malformed_recovery_metadata_fails_startup_keeps_the_rows_and_still_recovers_the_rest(
    db: Database, broken: dict[str, Any], kind: Kind
) -> None:
    async with resuming(db) as (svc, _):
        _, bad_session = await new_session(svc)
        _, good_session = await new_session(svc)
        _, intent_session = await new_session(svc)
        bad_pending, bad_turn, _ = await strand(svc, db, bad_session, qs=2, metadata=broken, kind=kind)
        good_pending, good_turn, _ = await strand(svc, db, good_session, kind=kind)
        # A claim stranded before any reservation: intent recovery (step 2) must still run.
        agent = await detached_request(svc, intent_session, kind)
        assert agent.bundle is not None
        async with db.write() as conn:
            await locks.lock_sessions(conn, [intent_session])
            await claims.claim(
                conn,
                session_id=intent_session,
                pending_id=agent.pending_id,
                message_ids=[agent.bundle.rows[0].id],
                answers=kind.answers_by_row(agent.bundle),
                rejected=False,
                claim_id="lonely",
                detach_rows=True,
            )
        await agent.close()
        bad_before = (await turn_rows(db, bad_session), await rows(db, bad_pending))
    async with resuming(db) as (restarted, _):
        with pytest.raises(RecoveryFailed, match=bad_turn):
            await restarted.recovery.run()
        # Kept whole for diagnosis: neither deleted nor partially reopened.
        assert (await turn_rows(db, bad_session), await rows(db, bad_pending)) == bad_before
        assert good_turn not in {t["id"] for t in await turn_rows(db, good_session)}
        assert [r["status"] for r in await rows(db, good_pending)] == ["pending"]
        assert [r["status"] for r in await rows(db, agent.pending_id)] == ["pending"]


@pytest.mark.scenario("S37")
async def test_claimed_rows_that_do_not_match_their_reservation_fail_startup(
    db: Database, kind: Kind
) -> None:
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc)
        _, other_session = await new_session(svc)
        foreign = await detached_request(svc, other_session, kind)
        assert foreign.bundle is not None
        pending_id, reserved, claimed = await strand(
            svc,
            db,
            session_id,
            metadata={reservations.SOURCE_MESSAGE_IDS: [foreign.bundle.rows[0].id]},
            kind=kind,
        )
        await foreign.close()

    async def stored() -> tuple[Any, ...]:
        return await turn_rows(db, session_id), await rows(db, pending_id), await rows(db, foreign.pending_id)

    before = await stored()
    async with resuming(db) as (restarted, _):
        with pytest.raises(RecoveryFailed, match="do not match"):
            await restarted.recovery.run()
        # Failed closed: the reservation is kept, its claimed rows stay claimed, nothing is reopened.
        assert reserved in {t["id"] for t in await turn_rows(db, session_id)}
        assert {r["status"] for r in await rows(db, pending_id) if r["id"] in claimed} == {"answered"}
        assert await stored() == before


@pytest.mark.scenario("S36")
async def test_outbox_replays_start_then_completion_and_keeps_the_marker_when_the_bus_refuses(
    db: Database,
) -> None:
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc)
        _, reserved, _ = await strand(svc, db, session_id, attempted=True)
    async with resuming(db) as (restarted, _):
        await restarted.recovery.run()
        # The resumed agent finished its turn before the start event was ever accepted.
        await restarted.operations.complete_turn(reserved)
        async with faulty("outbox.publish"):
            with pytest.raises(Exception, match=reserved):
                await restarted.resume_recovery.replay_outbox()
        assert {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}[reserved] == {
            reservations.START_EVENT_PENDING: True
        }
        async with recording(restarted) as log:
            assert await restarted.resume_recovery.replay_outbox() == 1
            await eventually(lambda: len(log.events) >= 2)
        assert [(e["type"], e["turn_id"]) for e in log.events] == [
            ("turn.started", reserved),
            ("turn.completed", reserved),
        ]
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        # A completed reservation is never reopened by recovery.
        assert stored[reserved]["metadata"] == {}
        assert stored[reserved]["completed"]
