"""A running clarification service over a real database and an in-process bus, and an agent driver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from backend.bus import TASK_CHANNEL, EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import task_session_messages as M
from backend.domain.lifecycle import Answer, Bundle, Claim, WaitOutcome
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.resume import ResumeOutcome

FAST = {
    "max_wait_seconds": 10.0,
    "live_confirmation_seconds": 2.0,
    "persistence_seconds": 5.0,
    "dispatch_seconds": 2.0,
    "heartbeat_seconds": 0.2,
}

QUESTION = {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}]}


def questions(n: int = 1) -> list[dict[str, Any]]:
    return [
        {"prompt": f"Question {i + 1}?", "options": [{"label": "yes"}, {"label": "no"}]} for i in range(n)
    ]


def yes(*question_ids: str) -> list[Answer]:
    return [Answer(q, (f"{q}_opt1",), None) for q in question_ids]


@asynccontextmanager
async def running(db: Database, **overrides: Any) -> AsyncIterator[Services]:
    bus = EventBus("memory://")
    await bus.connect()
    services = Services.build(
        Deps(db=db, bus=bus, settings=Settings(database_url=db.url, **{**FAST, **overrides}))
    )
    await services.waiters.start()
    try:
        yield services
    finally:
        await services.waiters.stop()
        await bus.disconnect()


async def new_session(services: Services, *, turn: bool = True) -> tuple[str, str]:
    task = await services.operations.create_task("a task")
    session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
    if turn:
        await services.operations.start_turn(session.id)
    return task.id, session.id


@dataclass
class Agent:
    """Drives one askClarification stream like a connected agent."""

    stream: AsyncGenerator[WaitOutcome, None]
    bundle: Bundle | None = None
    waiting: asyncio.Task[WaitOutcome] | None = None

    @classmethod
    async def ask(
        cls, services: Services, session_id: str, qs: list[dict[str, Any]] | None = None, **kw: Any
    ) -> Agent:
        agent = cls(
            services.clarifications.ask(
                session_id, [QUESTION] if qs is None else qs, kw.pop("context", None), **kw
            )
        )
        asked = await agent.stream.__anext__()
        agent.bundle = asked.bundle  # type: ignore[union-attr]
        return agent

    @property
    def pending_id(self) -> str:
        assert self.bundle is not None
        return self.bundle.pending_id

    @property
    def turn_id(self) -> str:
        assert self.bundle is not None
        assert self.bundle.turn_id is not None
        return self.bundle.turn_id

    def wait(self) -> asyncio.Task[WaitOutcome]:
        self.waiting = asyncio.create_task(self.stream.__anext__())
        return self.waiting

    async def outcome(self, seconds: float = 10) -> WaitOutcome:
        task = self.waiting or self.wait()
        return await asyncio.wait_for(task, seconds)

    async def close(self) -> None:
        if self.waiting is not None and not self.waiting.done():
            self.waiting.cancel()
            # It ends cancelled, or with whatever it raised before the cancellation reached it.
            await asyncio.gather(self.waiting, return_exceptions=True)
        await self.stream.aclose()


@dataclass
class EventLog:
    events: list[dict[str, Any]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def kinds(self, kind: str) -> list[str]:
        return [str(e["message_id"]) for e in self.events if e["type"] == kind]


RECORDING_MARK = "test.recording"


@asynccontextmanager
async def recording(services: Services) -> AsyncIterator[EventLog]:
    """Every task-channel event published after the block starts. A marker published first (the bus
    publishes in order) separates them from events of earlier writes still queued."""
    log = EventLog()
    started = asyncio.Event()

    async def run() -> None:
        async with services.deps.bus.subscribe(TASK_CHANNEL) as events:
            await services.deps.bus.publish(TASK_CHANNEL, {"type": RECORDING_MARK})
            async for e in events:
                if started.is_set():
                    log.events.append(e)
                elif e.get("type") == RECORDING_MARK:
                    started.set()

    log.task = asyncio.create_task(run())
    await asyncio.wait_for(started.wait(), 10)
    try:
        yield log
    finally:
        await asyncio.sleep(0.05)  # let published events arrive
        log.task.cancel()


async def rows(db: Database, pending_id: str) -> list[dict[str, Any]]:
    """Stored metadata of a bundle's rows, in question order."""
    async with db.read() as conn:
        result = await conn.execute(select(M.c.id, M.c.metadata).order_by(M.c.created_at, M.c.id))
        out = []
        for r in result:
            md = r.metadata if isinstance(r.metadata, dict) else json.loads(r.metadata)
            if md.get("pending_id") == pending_id:
                out.append({"id": r.id, **md})
    return out


async def all_metadata(db: Database) -> list[dict[str, Any]]:
    async with db.read() as conn:
        result = await conn.execute(select(M.c.id, M.c.metadata).order_by(M.c.id))
        return [
            {"id": r.id, **(r.metadata if isinstance(r.metadata, dict) else json.loads(r.metadata))}
            for r in result
        ]


@dataclass
class ScriptedResumer:
    """The resume seam played by a script: records claims, answers with a fixed outcome."""

    outcome: ResumeOutcome
    claims: list[Claim] = field(default_factory=list)
    settle: bool = True

    async def resume(self, claim: Claim) -> ResumeOutcome:
        self.claims.append(claim)
        return self.outcome
