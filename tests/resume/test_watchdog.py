"""Primary-answer watchdog after a live answer or ALLOW, and clarification-pause cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.db.engine import Database
from backend.repository import locks, turns
from tests.lifecycle.support import Kind
from tests.resume.support import GatedExecutor, answered_in_prompt, resuming, turn_rows
from tests.resume.test_watchdog_races import assert_cancelled_in_flight, finished, watched_live_answer

QUICK: dict[str, Any] = {"watchdog_seconds": 0.2}


async def test_silent_agent_gets_its_live_answer_again_as_one_resume_prompt(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watch, session_id, agent = await watched_live_answer(svc, monkeypatch, kind)
        answered_turn = agent.turn_id
        assert await finished(watch) == "dispatched"
        assert len(executor.received) == 1
        assert executor.received[0].pending_id == agent.pending_id
        assert kind.in_prompt() in executor.received[0].prompt
        assert answered_in_prompt(kind) in executor.received[0].prompt
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        assert stored[answered_turn]["completed"]
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == executor.received[0].turn_id
        await agent.close()


async def test_agent_activity_cancels_the_watchdog(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watch, session_id, agent = await watched_live_answer(svc, monkeypatch)
        await svc.operations.post_message(session_id, content="on it", author="agent", kind="message")
        # Cancelled by the message event, or (if the event came late) skipped by the preflight re-check.
        assert await finished(watch) in {"cancelled:activity:message.added", "skipped:agent active"}
        assert executor.received == []
        await agent.close()


@pytest.mark.scenario("S25")
async def test_watchdog_does_not_dispatch_after_its_turn_is_superseded(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watch, session_id, agent = await watched_live_answer(svc, monkeypatch, kind)
        # A newer turn, written without any event the watchdog could notice: only revalidation stops it.
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            newer = await turns.insert_turn(conn, session_id)
        assert await finished(watch) == "skipped:superseded"
        assert executor.received == []
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        assert not stored[newer.id]["completed"]
        assert not stored[agent.turn_id]["completed"]
        await agent.close()


@pytest.mark.scenario("S26")
async def test_watchdog_cancellation_reaches_in_flight_prompt_work_and_nothing_is_sent_twice(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate, **QUICK) as (svc, _):
        watch, session_id, agent = await watched_live_answer(svc, monkeypatch, kind)
        await asyncio.wait_for(gate.started.wait(), 5)
        svc.watchdogs.note_activity(session_id, "test")
        assert await finished(watch) == "cancelled:test"
        await assert_cancelled_in_flight(db, gate, session_id)
        await agent.close()


async def test_shutdown_cancels_an_armed_watchdog(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # Armed for long: shutdown comes first, and the test waits for the watch to end, not a clock.
    async with resuming(db, ["accepted"], watchdog_seconds=30.0) as (svc, executor):
        watch, _, agent = await watched_live_answer(svc, monkeypatch)
        assert watch.phase == "armed"
        await svc.watchdogs.stop()
        assert await finished(watch) == "cancelled:shutdown"
        assert executor.received == []
        await agent.close()
