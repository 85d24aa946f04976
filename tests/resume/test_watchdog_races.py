"""The primary-answer watchdog's fallback raced by a successor turn (S25) and by cancellation (S26).

Each test runs for both kinds of pending action (a live ALLOW arms a watch like a live answer does)
and captures the watch the answer arms, so it waits for the watch to finish
(`Watch.done`) and reads its outcome, instead of pausing and then looking for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.repository import locks, turns
from backend.services.container import Services
from backend.services.watchdog import Watch
from tests.lifecycle.support import CLARIFICATION, Driver, Kind, new_session
from tests.resume.support import GatedExecutor, resuming, turn_rows

QUICK: dict[str, Any] = {"watchdog_seconds": 0.1}


def capture_watches(svc: Services, monkeypatch: pytest.MonkeyPatch) -> list[Watch]:
    watches: list[Watch] = []
    armed = svc.watchdogs.armed

    def capture(claim: lc.Claim) -> Watch:
        watch = armed(claim)
        watches.append(watch)
        return watch

    monkeypatch.setattr(svc.watchdogs, "armed", capture)
    return watches


async def answered_live(svc: Services, session_id: str, kind: Kind = CLARIFICATION) -> Driver:
    """A pending action of `kind` answered while its agent waits (a permission request: ALLOW)."""
    agent = await kind.ask(svc, session_id)
    agent.wait()
    assert isinstance(await kind.answer(svc, agent.pending_id, agent.bundle), lc.Responded)
    assert isinstance(await agent.outcome(), lc.Answered)
    return agent


async def watched_live_answer(
    svc: Services, monkeypatch: pytest.MonkeyPatch, kind: Kind = CLARIFICATION
) -> tuple[Watch, str, Driver]:
    """A new session whose pending action was answered live; the watch the answer armed, the
    session, the agent."""
    watches = capture_watches(svc, monkeypatch)
    _, session_id = await new_session(svc)
    agent = await answered_live(svc, session_id, kind)
    (watch,) = watches
    return watch, session_id, agent


async def assert_cancelled_in_flight(db: Database, gate: GatedExecutor, session_id: str) -> None:
    """The cancellation reached the prompt call in flight, sent once. Cancelled after the attempt
    marker, it is ambiguous: the successor is kept, and never resent."""
    assert gate.cancelled, "the cancellation reached the in-flight prompt call"
    assert len(gate.received) == 1
    assert gate.received[0].turn_id in {t["id"] for t in await turn_rows(db, session_id)}


async def finished(watch: Watch) -> str:
    await asyncio.wait_for(watch.done.wait(), 10)
    return watch.outcome


def after(
    step: Callable[..., Awaitable[Any]], then: Callable[[], Awaitable[None]]
) -> Callable[..., Awaitable[Any]]:
    """`step`, then `then()` before its result is handed back: a change landing right after it."""

    async def wrapped(*args: Any) -> Any:
        result = await step(*args)
        await then()
        return result

    return wrapped


@pytest.mark.scenario("S25")
@pytest.mark.parametrize("window", ["after_preflight", "after_pause_cancel"])
async def test_a_successor_appearing_after_the_watchdog_preflight_is_never_prompted_or_cancelled(
    db: Database, monkeypatch: pytest.MonkeyPatch, window: str, kind: Kind
) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        successor: list[str] = []

        async def newer_turn() -> None:
            # Written without an event the watchdog could hear: only its own re-checks can stop it.
            async with db.write() as conn:
                await locks.lock_sessions(conn, [session_id])
                successor.append((await turns.insert_turn(conn, session_id)).id)

        if window == "after_preflight":
            monkeypatch.setattr(svc.watchdogs, "_preflight", after(svc.watchdogs._preflight, newer_turn))
        else:
            monkeypatch.setattr(
                svc.orchestrator, "cancel_paused", after(svc.orchestrator.cancel_paused, newer_turn)
            )
        agent = await answered_live(svc, session_id, kind)
        answered_turn = agent.turn_id
        (watch,) = watches
        outcome = await finished(watch)
        assert len(successor) == 1, "the successor appeared inside the fallback"
        if window == "after_preflight":
            # The pause re-check refuses: the captured turn is no longer the current one.
            assert outcome == "skipped:superseded"
        else:
            # Serialized prompt admission refuses under the session lock.
            assert outcome == "failed:the clarification's turn is no longer current"
        assert executor.received == []
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        assert set(stored) == {answered_turn, successor[0]}, "no turn was reserved for the answer"
        assert stored[successor[0]]["completed"] is False
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == successor[0]
        await agent.close()


@pytest.mark.scenario("S26")
async def test_shutdown_during_the_fallback_cancels_its_in_flight_prompt_and_nothing_is_sent_twice(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate, **QUICK) as (svc, _):
        watch, session_id, agent = await watched_live_answer(svc, monkeypatch, kind)
        await asyncio.wait_for(gate.started.wait(), 5)
        assert watch.phase == "fallback"
        await svc.watchdogs.stop()
        assert await finished(watch) == "cancelled:shutdown"
        await assert_cancelled_in_flight(db, gate, session_id)
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == gate.received[0].turn_id
        await agent.close()


@pytest.mark.scenario("S26")
@pytest.mark.parametrize("by", ["activity", "shutdown"])
async def test_cancelling_the_fallback_interrupts_its_in_flight_repository_call(
    db: Database, monkeypatch: pytest.MonkeyPatch, by: str, kind: Kind
) -> None:
    async with resuming(db, ["accepted"], **QUICK) as (svc, executor):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        entered = asyncio.Event()
        cancel_paused = svc.orchestrator.cancel_paused

        async def observed(snapshot: Any) -> bool:
            entered.set()
            return await cancel_paused(snapshot)

        monkeypatch.setattr(svc.orchestrator, "cancel_paused", observed)
        agent = await answered_live(svc, session_id, kind)
        answered_turn = agent.turn_id
        (watch,) = watches
        # The test holds the session lock, so the fallback's pause write waits inside the database.
        async with db.write() as conn:
            await locks.lock_sessions(conn, [session_id])
            await asyncio.wait_for(entered.wait(), 10)
            if by == "activity":
                svc.watchdogs.note_activity(session_id, "test")
            else:
                await svc.watchdogs.stop()
            # It ends while the lock is still held: the write it waited on was abandoned, not finished.
            assert await finished(watch) == f"cancelled:{'test' if by == 'activity' else 'shutdown'}"
        assert executor.received == []
        stored = {t["id"]: t["completed"] for t in await turn_rows(db, session_id)}
        assert stored == {answered_turn: False}, "the paused turn was neither cancelled nor succeeded"
        await agent.close()
