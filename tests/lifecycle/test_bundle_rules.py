"""Requirements outside the numbered scenarios: bundle identity, isolation between bundles, and rows
the rule must keep inert (legacy turn ids, a missing durable turn, a session whose expiry failed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import delete

from backend.db.engine import Database
from backend.db.tables import task_session_turns
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState, ConflictReason
from backend.repository import bundles, claims, locks, pending, turns
from backend.services.container import Services
from backend.services.events_out import publish_session_change
from backend.services.pending.actions import TaskAdvanced
from backend.services.pending.core import trusted
from tests.lifecycle.support import (
    Agent,
    Kind,
    all_metadata,
    new_session,
    questions,
    recording,
    rows,
    running,
    yes,
)
from tests.repository.seed import seed_session

T0 = "2026-01-01T10:00:00Z"


def clarification(
    mid: str, turn_id: str, pending_id: str = "b1", qid: str = "q1", **md: Any
) -> dict[str, Any]:
    return {
        "id": mid,
        "turn_id": turn_id,
        "type": "clarification_request",
        "metadata": {
            "pending_id": pending_id,
            "question_id": qid,
            "status": "pending",
            "agent_disconnected": True,
            "options": [{"id": f"{qid}_opt1", "label": "yes"}, {"id": f"{qid}_opt2", "label": "no"}],
            **md,
        },
    }


def turn(tid: str, at: str = T0) -> dict[str, Any]:
    return {"id": tid, "started_at": at, "created_at": at, "completed_at": None}


async def rows_with_turns(db: Database, pending_id: str) -> list[dict[str, Any]]:
    async with db.read() as conn:
        found = await bundles.bundle_facts(conn, [pending_id])
    return [{"turn_id": r.turn_id, "status": r.status} for r in found[pending_id][0]]


async def projection(svc: Services, session_id: str) -> str | None:
    async with svc.deps.db.read() as conn:
        return (await pending.pending_for_sessions(conn, [session_id]))[session_id].pending_action


@pytest.mark.parametrize(
    ("turn_ids", "usable"),
    [(["t1", ""], True), (["", "t1"], True), (["t1", "t0"], False)],
    ids=["legacy-empty-last", "legacy-empty-first", "conflicting"],
)
async def test_bundle_turn_identity_ignores_legacy_empty_ids_and_refuses_conflicting_ones(
    db: Database, turn_ids: list[str], usable: bool
) -> None:
    await seed_session(
        db,
        {
            "turns": [turn("t0", "2026-01-01T09:00:00Z"), turn("t1")],
            "messages": [clarification(f"m{i}", t, qid=f"q{i}") for i, t in enumerate(turn_ids)],
        },
    )
    async with running(db) as svc:
        bundle = await svc.pending.bundle("b1", authorize=trusted)
        assert bundle is not None
        answers = yes("q0", "q1")
        if usable:
            # One consistent non-empty id: the bundle belongs to the current turn and is answerable.
            assert bundle.turn_id == "t1"
            assert bundle.state == BundleState.ACTIVE_DETACHED
            assert [r.turn_id for r in bundle.pending_rows] == ["t1"]
            assert await projection(svc, "s1") == "clarification"
            done = await svc.pending.respond("b1", [], rejected=True, authorize=trusted)
            assert isinstance(done, lc.Responded)
            # The legacy row is history (never active by the rule); the bundle is finished.
            assert {r["turn_id"]: r["status"] for r in await rows_with_turns(db, "b1")} == {
                "t1": "rejected",
                "": "pending",
            }
            finished = await svc.pending.bundle("b1", authorize=trusted)
            assert finished is not None
            assert finished.state == BundleState.TERMINAL
            assert await projection(svc, "s1") is None
        else:
            # Conflicting ids: no turn identity, so the bundle is inert history and nothing is written.
            assert bundle.turn_id is None
            assert bundle.state == BundleState.SUPERSEDED_HISTORY
            conflict = await svc.pending.respond("b1", answers, rejected=False, authorize=trusted)
            assert isinstance(conflict, lc.Conflict)
            assert conflict.reason == ConflictReason.SUPERSEDED
            assert {r["status"] for r in await rows(db, "b1")} == {"pending"}


async def test_a_live_waiter_is_drained_when_its_row_has_no_durable_turn_and_the_row_stays_inert(
    db: Database,
) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        agent.wait()
        assert agent.bundle is not None
        # Bad data: the question's turn row disappears (never became durable, or was removed).
        async with db.write() as conn:
            await conn.execute(
                delete(task_session_turns).where(task_session_turns.c.id == agent.bundle.turn_id)
            )
        before = await all_metadata(db)
        await publish_session_change(
            svc.deps.bus, task_id=task_id, session_id=session_id, kind="turn.completed"
        )
        # The in-memory waiter is drained (the agent is told its question closed: it takes no answer) ...
        assert await agent.outcome() == lc.Closed(agent.pending_id, "pending")
        # ... but the row is left exactly as it was: pending, inert, not answerable, not projected.
        assert await all_metadata(db) == before
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.SUPERSEDED_HISTORY
        assert await projection(svc, session_id) is None
        conflict = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(conflict, lc.Conflict)
        assert await all_metadata(db) == before
        await agent.close()


@pytest.mark.parametrize("action", ["reject", "cancel", "delete", "expire"])
async def test_one_bundles_reject_cancel_delete_or_expiry_leaves_sibling_bundles_untouched(
    db: Database, action: str
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        _, other_session = await new_session(svc)
        older = await Agent.ask(svc, session_id, questions(1), timeout_seconds=0.05)
        await older.outcome()
        await svc.operations.start_turn(session_id)
        target = await Agent.ask(svc, session_id, questions(2))
        target.wait()
        sibling = await Agent.ask(
            svc, session_id, [{"prompt": "Sibling?", "options": [{"label": "a"}, {"label": "b"}]}]
        )
        sibling.wait()
        elsewhere = await Agent.ask(svc, other_session, questions(1))
        elsewhere.wait()
        untouched = {a.pending_id: await rows(db, a.pending_id) for a in (older, sibling, elsewhere)}
        if action == "expire":
            untouched.pop(sibling.pending_id)  # expiry is per session: the same-turn sibling expires too
        if action == "reject":
            assert isinstance(
                await svc.pending.respond(target.pending_id, [], rejected=True, authorize=trusted),
                lc.Responded,
            )
        elif action == "cancel":
            assert await svc.pending.cancel(target.pending_id, authorize=trusted) is True
        elif action == "delete":
            for r in await rows(db, target.pending_id):
                assert await svc.operations.delete_message(r["id"]) is True
        else:
            from backend.domain.states import SessionState

            await svc.operations.set_session_state(session_id, SessionState.COMPLETED)
        for pending_id, before in untouched.items():
            assert await rows(db, pending_id) == before, pending_id
        # The siblings' waiters keep waiting (their bundles are still live).
        await asyncio.sleep(0.05)
        assert not elsewhere.waiting.done()  # type: ignore[union-attr]
        if action != "expire":
            assert not sibling.waiting.done()  # type: ignore[union-attr]
            bundle = await svc.pending.bundle(sibling.pending_id, authorize=trusted)
            assert bundle is not None
            assert bundle.state == BundleState.ACTIVE_LIVE
        for agent in (older, target, sibling, elsewhere):
            await agent.close()


@pytest.mark.parametrize("order", ["newer-turn-first", "detach-first"])
async def test_detachment_racing_a_newer_turn_never_overwrites(db: Database, order: str) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        waiting = agent.wait()
        async with recording(svc) as log:
            if order == "newer-turn-first":
                await svc.operations.start_turn(session_id)
                # Superseded, not detached: the question stays pending history and takes no answer.
                assert await waiting == lc.Closed(agent.pending_id, "pending")
            else:
                waiting.cancel()  # the agent's connection drops: detach in its own context
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                await svc.operations.start_turn(session_id)
        (row,) = await rows(db, agent.pending_id)
        # A detach after the newer turn changes nothing: the row is history, not current.
        assert row["status"] == "pending"
        assert row["agent_disconnected"] is (order == "detach-first")
        updated = log.kinds("message.updated")
        assert updated == ([] if order == "newer-turn-first" else [row["id"]])
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.SUPERSEDED_HISTORY
        # Concurrently as well: whichever wins, the newer turn owns the session and the row is inert.
        again = await Agent.ask(svc, session_id)
        racing = again.wait()
        racing.cancel()
        await asyncio.gather(racing, svc.operations.start_turn(session_id), return_exceptions=True)
        (raced,) = await rows(db, again.pending_id)
        assert raced["status"] == "pending"
        assert await projection(svc, session_id) is None
        await agent.close()
        await again.close()


async def test_a_wait_that_runs_out_after_a_newer_turn_superseded_its_question_ends_closed(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.3)
        # A newer turn written without its event: the waiter learns of it only as its wait runs out.
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            await turns.insert_turn(conn, session_id)
        assert await agent.outcome() == lc.Closed(agent.pending_id, "pending")
        (row,) = await rows(db, agent.pending_id)
        assert row["status"] == "pending"
        assert not row.get("agent_disconnected"), "history is never detached"
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.SUPERSEDED_HISTORY
        await agent.close()


async def test_a_wait_that_runs_out_on_a_current_question_still_detaches(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, timeout_seconds=0.1)
        assert await agent.outcome() == lc.Detached(agent.pending_id)
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        await agent.close()


async def test_a_terminal_session_whose_expiry_write_failed_still_rejects_a_stale_claim(db: Database) -> None:
    # The transition committed but the expiry of its pending rows did not (older data, failed write).
    await seed_session(
        db, {"session_state": "FAILED", "turns": [turn("t1")], "messages": [clarification("m1", "t1")]}
    )
    async with running(db) as svc:
        before = await all_metadata(db)
        bundle = await svc.pending.bundle("b1", authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.TERMINAL
        assert await projection(svc, "s1") is None
        stale = await svc.pending.respond("b1", yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(stale, lc.Conflict)
        assert stale.reason == ConflictReason.TERMINAL
        assert await svc.pending.cancel("b1", authorize=trusted) is False
        # Even a claim that got past the service is refused by the terminal-session predicate.
        async with db.write() as conn:
            await locks.lock_sessions(conn, ["s1"])
            claimed = await claims.claim(
                conn,
                session_id="s1",
                pending_id="b1",
                message_ids=["m1"],
                answers={},
                rejected=True,
                claim_id="c1",
                detach_rows=True,
            )
        assert claimed == []
        assert await all_metadata(db) == before
        # The pending history does not block the workflow either.
        assert isinstance(await svc.pending.advance_task("task1", "next", authorize=trusted), TaskAdvanced)


async def test_a_wait_cancelled_as_a_notice_arrives_ends_at_once_and_detaches(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        waiting = agent.wait()
        (waiter,) = [w for w in svc.waiters._waiters.values() if w.pending_id == agent.pending_id]
        await asyncio.sleep(0.05)  # the wait is blocked on its queue
        waiter.wake()  # a session event lands in the same loop iteration as the cancellation
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # The disconnected agent's bundle is detached, not left with a waiter nobody listens to.
        assert {r["agent_disconnected"] for r in await rows(db, agent.pending_id)} == {True}
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        await agent.stream.aclose()
