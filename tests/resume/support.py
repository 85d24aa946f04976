"""Resume tests: the service over a real database with a scripted (or gated) executor swapped in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import select

from backend import faults
from backend.db.engine import Database
from backend.db.tables import task_session_turns as T
from backend.executors.base import DispatchOutcome, DispatchResult, PromptRequest
from backend.executors.scripted import ScriptedExecutor
from backend.services.container import Services
from tests.lifecycle.support import CLARIFICATION, Agent, Driver, Kind, running

RESUME_FAST = {"watchdog_seconds": 30.0, "persistence_seconds": 2.0, "dispatch_seconds": 1.0}


@asynccontextmanager
async def resuming(
    db: Database, outcomes: list[str] | None = None, *, executor: Any = None, **settings: Any
) -> AsyncIterator[tuple[Services, Any]]:
    async with running(db, **{**RESUME_FAST, **settings}) as svc:
        chosen = executor if executor is not None else ScriptedExecutor(outcomes or ["accepted"])
        svc.orchestrator.executor = chosen
        await svc.watchdogs.start()
        try:
            yield svc, chosen
        finally:
            await svc.watchdogs.stop()


@asynccontextmanager
async def faulty(*points: str) -> AsyncIterator[None]:
    before = faults.configured()
    faults.configure(points)
    try:
        yield
    finally:
        faults.configure(before)


async def detached_question(svc: Services, session_id: str, qs: list[dict[str, Any]] | None = None) -> Agent:
    """A question whose wait timed out: active, detached, answerable."""
    agent = await Agent.ask(svc, session_id, qs, timeout_seconds=0.05)
    await agent.outcome()
    return agent


async def detached_request(
    svc: Services, session_id: str, kind: Kind = CLARIFICATION, qs: list[dict[str, Any]] | None = None
) -> Driver:
    """A pending action of `kind` whose wait timed out: active, detached, answerable."""
    agent = await kind.ask(svc, session_id, qs=qs, timeout_seconds=0.05)
    await agent.outcome()
    return agent


def answered_in_prompt(kind: Kind) -> str:
    """A text the resume prompt carries for what `kind.answer` sent: the chosen option's label, or
    the ALLOW of the tool call as asked."""
    return "The user allowed it. " if kind.is_permission else "SQLite"


async def turn_rows(db: Database, session_id: str) -> list[dict[str, Any]]:
    """Every stored turn of the session (visible or not) with its metadata, oldest first."""
    async with db.read() as conn:
        result = await conn.execute(
            select(T).where(T.c.session_id == session_id).order_by(T.c.started_at, T.c.id)
        )
        out = []
        for r in result:
            md = r.metadata if isinstance(r.metadata, dict) else json.loads(r.metadata)
            out.append({"id": r.id, "completed": r.completed_at is not None, "metadata": md})
    return out


class GatedExecutor:
    """An executor that holds each dispatch until the test releases it with an outcome."""

    name = "gated"

    def __init__(self) -> None:
        self.received: list[PromptRequest] = []
        self.started = asyncio.Event()
        self.cancelled = False
        self._release: asyncio.Future[str] | None = None

    def release(self, outcome: str) -> None:
        assert self._release is not None
        self._release.set_result(outcome)

    # The executor protocol's deadline is not used: the test itself decides when the dispatch ends.
    async def dispatch(self, request: PromptRequest, *, deadline_seconds: float) -> DispatchResult:  # noqa: ARG002
        self.received.append(request)
        self._release = asyncio.get_running_loop().create_future()
        self.started.set()
        try:
            outcome = await self._release
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return DispatchResult(DispatchOutcome(outcome), "gated")


async def eventually(check: Any, seconds: float = 3.0) -> None:
    """Published events arrive asynchronously: wait (bounded) until `check()` holds."""
    for _ in range(int(seconds / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    assert check()
