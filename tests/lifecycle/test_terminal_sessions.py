"""Sessions that end, and writes that must outlive the request that started them (S32, S33), for
every kind of pending action."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState, ConflictReason
from backend.domain.states import ClarificationStatus, SessionState
from backend.repository import locks, pending
from backend.services.container import Services
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, questions, recording, rows, running
from tests.resume.support import eventually

TERMINAL = [SessionState.COMPLETED, SessionState.FAILED, SessionState.CANCELLED]


@asynccontextmanager
async def session_lock_held(db: Database, session_id: str) -> AsyncIterator[asyncio.Event]:
    """Another transaction holds the session's write lock until the yielded event is set (or the end)."""
    locked, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            locked.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.wait_for(locked.wait(), 10)
    try:
        yield release
    finally:
        release.set()
        await holder


async def projection(svc: Services, session_id: str) -> str | None:
    async with svc.deps.db.read() as conn:
        return (await pending.pending_for_sessions(conn, [session_id]))[session_id].pending_action


@pytest.mark.scenario("S33")
@pytest.mark.parametrize("state", TERMINAL, ids=[s.value for s in TERMINAL])
async def test_a_terminal_transition_expires_every_current_turn_bundle_before_it_is_published(
    db: Database, state: SessionState, kind: Kind
) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        old = await kind.ask(
            svc, session_id, qs=questions(1), tool_input={"command": "make old"}, timeout_seconds=0.05
        )
        await old.outcome()
        await svc.operations.start_turn(session_id)  # the old question is history now
        detached = await kind.ask(svc, session_id, qs=questions(2), timeout_seconds=0.05)
        await detached.outcome()
        live = await kind.ask(
            svc,
            session_id,
            qs=[{"prompt": "Live?", "options": [{"label": "a"}, {"label": "b"}]}],
            tool_input={"command": "ls"},
        )
        live.wait()
        current_rows = [r["id"] for p in (detached, live) for r in await rows(db, p.pending_id)]
        assert await projection(svc, session_id) == kind.value.value
        async with recording(svc) as log:
            ended = await svc.operations.set_session_state(session_id, state)
            await eventually(lambda: any(e["type"] == "session.state" for e in log.events))
        assert ended.state == state.value
        # Every current-turn pending row expired in the transition; each was published before it.
        kinds = [(e["type"], e.get("message_id")) for e in log.events]
        expired_events = [str(m) for k, m in kinds if k == "message.updated"]
        assert sorted(expired_events) == sorted(current_rows)
        assert kinds.index(("session.state", None)) > max(
            kinds.index(("message.updated", m)) for m in current_rows
        )
        for agent in (detached, live):
            assert {r["status"] for r in await rows(db, agent.pending_id)} == {"expired"}
            bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
            assert bundle is not None
            assert bundle.state == BundleState.TERMINAL
        # No overlay is left: no pending projection, the live waiter was told, answers conflict.
        assert await projection(svc, session_id) is None
        closed = await live.outcome()
        assert closed == lc.Closed(live.pending_id, ClarificationStatus.EXPIRED.value)
        conflict = await kind.answer(svc, detached.pending_id, detached.bundle)
        assert isinstance(conflict, lc.Conflict)
        assert conflict.reason == ConflictReason.TERMINAL
        # Older-turn history is not rewritten.
        assert {r["status"] for r in await rows(db, old.pending_id)} == {"pending"}
        summary = (await svc.summaries.refresh([task_id]))[task_id]
        assert summary.pending_action is None
        for agent in (old, detached, live):
            await agent.close()


@pytest.mark.scenario("S32")
async def test_a_cancelled_request_detaches_in_a_finite_context_that_gives_up_while_a_lock_is_held(
    db: Database, kind: Kind
) -> None:
    async with running(db, persistence_seconds=0.5) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        waiting = agent.wait()
        async with session_lock_held(db, session_id):
            waiting.cancel()  # the transport goes away while another writer holds the session
            # The stream's cleanup detaches in a context of its own: not aborted by the
            # cancellation, it runs until its own deadline ends it, although the lock is still held
            # (an unbounded detach would wait here for as long as the lock is held).
            await asyncio.wait({waiting}, timeout=10)
            assert waiting.done(), "the detach waited on the lock instead of its own deadline"
            with pytest.raises((TimeoutError, asyncio.CancelledError)):
                waiting.result()
        await agent.stream.aclose()
        # Nothing half-written: the detach never committed, the waiter is gone, the question is
        # answerable as a detached one.
        assert {r["agent_disconnected"] for r in await rows(db, agent.pending_id)} == {False}
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED


@pytest.mark.scenario("S32")
async def test_expiry_under_a_cancelled_request_still_commits_and_publishes(db: Database, kind: Kind) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        async with recording(svc) as log:
            async with session_lock_held(db, session_id) as release:
                request = asyncio.create_task(
                    svc.operations.set_session_state(session_id, SessionState.FAILED)
                )
                await asyncio.sleep(0.1)  # the transition waits for the lock...
                request.cancel()  # ...when its request is cancelled
                with pytest.raises(asyncio.CancelledError):
                    await request
                release.set()
            await eventually(lambda: any(e["type"] == "session.state" for e in log.events))
        # The expiry ran to the end in its own context: persisted and published.
        assert (await svc.reads.session(session_id)).state == SessionState.FAILED.value
        (row,) = await rows(db, agent.pending_id)
        assert row["status"] == "expired"
        assert log.kinds("message.updated") == [row["id"]]
        await agent.close()


@pytest.mark.scenario("S32")
async def test_expiry_with_the_session_lock_held_past_its_deadline_fails_and_changes_nothing(
    db: Database, kind: Kind
) -> None:
    async with running(db, persistence_seconds=0.5) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        async with session_lock_held(db, session_id):
            transition = asyncio.create_task(
                svc.operations.set_session_state(session_id, SessionState.COMPLETED)
            )
            await asyncio.wait({transition}, timeout=10)
            assert transition.done(), "the transition waited on the lock instead of its own deadline"
            with pytest.raises(TimeoutError):
                transition.result()
        assert (await svc.reads.session(session_id)).state == SessionState.WAITING_FOR_INPUT.value
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"pending"}
        # The session is not wedged: the same transition succeeds once the lock is free.
        done = await svc.operations.set_session_state(session_id, SessionState.COMPLETED)
        assert done.state == SessionState.COMPLETED.value
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"expired"}
        await agent.close()
