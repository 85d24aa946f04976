"""The primary-answer watchdog is cancelled by the agent's message, thinking and tool frames.

Any frame the agent streams into the session after a live answer (or a live ALLOW) is activity:
armed, the watchdog stops waiting; in its fallback (its prompt dispatch in flight), the cancellation
reaches the dispatch and nothing is sent twice.
"""

from __future__ import annotations

import asyncio

import pytest

from backend.db.engine import Database
from backend.services.container import Services
from tests.lifecycle.support import Kind, new_session
from tests.resume.support import GatedExecutor, resuming, turn_rows
from tests.resume.test_watchdog_races import answered_live, capture_watches, finished

FRAMES = ["message", "thinking", "tool_call"]


async def frame(svc: Services, session_id: str, frame_kind: str) -> None:
    await svc.operations.post_message(
        session_id, content=f"a {frame_kind} frame", author="agent", kind=frame_kind
    )


@pytest.mark.parametrize("frame_kind", FRAMES)
async def test_an_agent_frame_cancels_an_armed_watchdog_before_it_falls_back(
    db: Database, monkeypatch: pytest.MonkeyPatch, frame_kind: str
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate, watchdog_seconds=30.0) as (svc, _):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        agent = await answered_live(svc, session_id)
        (watch,) = watches
        assert watch.phase == "armed"
        await frame(svc, session_id, frame_kind)
        assert await finished(watch) == "cancelled:activity:message.added"
        assert gate.received == []
        await agent.close()


@pytest.mark.scenario("S26")
@pytest.mark.parametrize("frame_kind", FRAMES)
async def test_an_agent_frame_cancels_the_fallback_while_its_prompt_is_in_flight(
    db: Database, monkeypatch: pytest.MonkeyPatch, frame_kind: str, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate, watchdog_seconds=0.1) as (svc, _):
        watches = capture_watches(svc, monkeypatch)
        _, session_id = await new_session(svc)
        agent = await answered_live(svc, session_id, kind)
        await asyncio.wait_for(gate.started.wait(), 5)  # the fallback is dispatching the answer
        (watch,) = watches
        assert watch.phase == "fallback"
        await frame(svc, session_id, frame_kind)
        assert await finished(watch) == "cancelled:activity:message.added"
        assert gate.cancelled, "the cancellation did not reach the in-flight dispatch"
        assert len(gate.received) == 1
        # Cancelled after the attempt marker: ambiguous, so the successor is kept and never resent.
        stored = {t["id"] for t in await turn_rows(db, session_id)}
        assert gate.received[0].turn_id in stored
        await asyncio.sleep(0.3)
        assert len(gate.received) == 1
        await agent.close()
