"""Primary-answer watchdog after live delivery, and clarification-pause cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.repository import locks, turns
from backend.services.bundles import trusted
from tests.lifecycle.support import Agent, new_session, yes
from tests.resume.support import GatedExecutor, resuming, turn_rows
from tests.resume.test_watchdog_races import capture_watches, finished

QUICK: dict[str, Any] = {"watchdog_seconds": 0.2}


async def _answered_live(svc, session_id: str) -> Agent:  # type: ignore[no-untyped-def]
    agent = await Agent.ask(svc, session_id)
    agent.wait()
    assert isinstance(
        await svc.clarifications.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted),
        lc.Responded,
    )
    assert isinstance(await agent.outcome(), lc.Answered)
    return agent


async def test_silent_agent_gets_its_live_answer_again_as_one_resume_prompt(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        agent = await _answered_live(svc, session_id)
        clarification_turn = agent.bundle.turn_id  # type: ignore[union-attr]
        (watch,) = watches
        assert await finished(watch) == "dispatched"
        assert len(executor.received) == 1
        assert executor.received[0].pending_id == agent.pending_id
        assert "SQLite" in executor.received[0].prompt
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        assert stored[clarification_turn]["completed"]
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == executor.received[0].turn_id
        await agent.close()


async def test_agent_activity_cancels_the_watchdog(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        agent = await _answered_live(svc, session_id)
        await svc.operations.post_message(session_id, content="on it", author="agent", kind="message")
        (watch,) = watches
        # Cancelled by the message event, or (if the event came late) skipped by the preflight re-check.
        assert await finished(watch) in {"cancelled:activity:message.added", "skipped:agent active"}
        assert executor.received == []
        await agent.close()


@pytest.mark.scenario("S25")
async def test_watchdog_does_not_dispatch_after_its_turn_is_superseded(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        agent = await _answered_live(svc, session_id)
        # A newer turn, written without any event the watchdog could notice: only revalidation stops it.
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            newer = await turns.insert_turn(conn, session_id)
        (watch,) = watches
        assert await finished(watch) == "skipped:superseded"
        assert executor.received == []
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        assert not stored[newer.id]["completed"]
        assert not stored[agent.turn_id]["completed"]
        await agent.close()


@pytest.mark.scenario("S26")
async def test_watchdog_cancellation_reaches_in_flight_prompt_work_and_nothing_is_sent_twice(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate, **QUICK) as (svc, _):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        agent = await _answered_live(svc, session_id)
        await asyncio.wait_for(gate.started.wait(), 5)
        svc.watchdogs.note_activity(session_id, "test")
        (watch,) = watches
        assert await finished(watch) == "cancelled:test"
        assert gate.cancelled
        assert len(gate.received) == 1
        # Cancelled after the attempt marker: ambiguous, so the successor is kept, never resent.
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        assert gate.received[0].turn_id in stored
        await agent.close()


async def test_shutdown_cancels_an_armed_watchdog(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # Armed for long: shutdown comes first, and the test waits for the watch to end, not a clock.
    async with resuming(db, ["accepted"], watchdog_seconds=30.0) as (svc, executor):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        agent = await _answered_live(svc, session_id)
        (watch,) = watches
        assert watch.phase == "armed"
        await svc.watchdogs.stop()
        assert await finished(watch) == "cancelled:shutdown"
        assert executor.received == []
        await agent.close()
