"""A running clarification service over a real database and an in-process bus, agent drivers for both
kinds of pending action (a clarification, a permission request), and the `kind` fixture over both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import select

from backend.bus import TASK_CHANNEL, EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import task_session_messages as M
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import Answer, Bundle, Claim, WaitOutcome
from backend.domain.permissions import ALLOW, DENY, Decision, Sent, request_of
from backend.domain.states import PendingActionKind
from backend.repository import message_fields
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.pending.core import trusted
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
            services.pending.ask(session_id, [QUESTION] if qs is None else qs, kw.pop("context", None), **kw)
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


BASH = {"command": "alembic upgrade head", "description": "migrate staging"}


class ToolAgent:
    """Drives one askPermission stream like a connected agent. `first` is what the ask yielded first:
    `Asked`, or `Decided` alone when a remembered rule allowed the call."""

    def __init__(self, stream: AsyncGenerator[Any, None]) -> None:
        self.stream = stream
        self.first: Any = None
        self.waiting: asyncio.Task[Any] | None = None

    @classmethod
    async def ask(cls, svc: Services, session_id: str, tool_input: Any = None, **kw: Any) -> ToolAgent:
        agent = cls(
            svc.permissions.ask(
                session_id, kw.pop("tool_name", "Bash"), BASH if tool_input is None else tool_input, **kw
            )
        )
        agent.first = await agent.stream.__anext__()
        return agent

    @property
    def bundle(self) -> Bundle | None:
        return self.first.bundle if isinstance(self.first, lc.Asked) else None

    @property
    def pending_id(self) -> str:
        if isinstance(self.first, lc.Decided):
            return self.first.pending_id
        return str(self.first.bundle.pending_id)

    @property
    def turn_id(self) -> str:
        assert self.bundle is not None
        assert self.bundle.turn_id is not None
        return self.bundle.turn_id

    def wait(self) -> asyncio.Task[Any]:
        self.waiting = asyncio.create_task(self.stream.__anext__())
        return self.waiting

    async def outcome(self, seconds: float = 10) -> Any:
        return await asyncio.wait_for(self.waiting or self.wait(), seconds)

    async def close(self) -> None:
        if self.waiting is not None and not self.waiting.done():
            self.waiting.cancel()
            await asyncio.gather(self.waiting, return_exceptions=True)
        await self.stream.aclose()


async def decide(svc: Services, pending_id: str, behavior: str = "allow", **kw: Any) -> lc.RespondOutcome:
    return await svc.permissions.respond(pending_id, Sent(behavior, **kw), decided_by="u1", authorize=trusted)


Driver = Agent | ToolAgent


@dataclass(frozen=True)
class Kind:
    """One kind of pending action, as the lifecycle tests drive it: what an agent asks, what a person
    sends to answer it (a clarification: the first option of every question; a permission request:
    ALLOW with the input as asked) and to end it without an answer (a skip; a DENY).

    `ask` takes what to ask per kind: `qs` (questions) for a clarification, `tool_input` for a
    permission request; each kind ignores the other's, so one call serves both."""

    value: PendingActionKind

    def __str__(self) -> str:
        return self.value.value

    @property
    def is_permission(self) -> bool:
        return self.value == PendingActionKind.PERMISSION

    async def ask(
        self,
        svc: Services,
        session_id: str,
        *,
        qs: list[dict[str, Any]] | None = None,
        tool_input: Any = None,
        **kw: Any,
    ) -> Driver:
        if self.is_permission:
            return await ToolAgent.ask(svc, session_id, tool_input, **kw)
        return await Agent.ask(svc, session_id, qs, **kw)

    def answers(self, bundle: Bundle) -> tuple[Answer | Decision, ...]:
        """What `answer` sends for this bundle, as the agent (or a resume) receives it."""
        if self.is_permission:
            request = request_of(bundle.rows[0].metadata)
            assert request is not None
            return (Decision(ALLOW, updated_input=request.get("input")),)
        return tuple(yes(*(str(r.metadata["question_id"]) for r in bundle.rows)))

    def answers_by_row(self, bundle: Bundle) -> dict[str, Answer | Decision]:
        """The same answers keyed as a claim stores them (`claims.claim(answers=...)`)."""
        return {a.question_id: a for a in self.answers(bundle)}

    async def answer(self, svc: Services, pending_id: str, bundle: Bundle | None = None) -> lc.RespondOutcome:
        """Answer every question with its first option / ALLOW as asked. Without `bundle` (its
        questions) it is read first."""
        if self.is_permission:
            return await decide(svc, pending_id, ALLOW)
        if bundle is None:
            bundle = await svc.pending.bundle(pending_id, authorize=trusted)
            assert bundle is not None
        answers = [a for a in self.answers(bundle) if isinstance(a, Answer)]
        return await svc.pending.respond(pending_id, answers, rejected=False, authorize=trusted)

    async def skip_or_deny(self, svc: Services, pending_id: str) -> lc.RespondOutcome:
        if self.is_permission:
            return await decide(svc, pending_id, DENY)
        return await svc.pending.respond(pending_id, [], rejected=True, authorize=trusted)

    async def active(self, svc: Services, session_ids: list[str]) -> dict[str, Bundle]:
        return await svc.pending.active_bundles(session_ids, self.value)

    def in_prompt(self) -> str:
        """A text the resume prompt of `answer` on the default ask carries."""
        return "alembic upgrade head" if self.is_permission else "Which database?"


CLARIFICATION = Kind(PendingActionKind.CLARIFICATION)
PERMISSION = Kind(PendingActionKind.PERMISSION)
KINDS = [CLARIFICATION, PERMISSION]


@pytest.fixture(params=KINDS, ids=str)
def kind(request: pytest.FixtureRequest) -> Kind:
    """Each kind of pending action in turn (a test marked for one kind only: parametrize `kind`
    indirectly with `[PERMISSION]`)."""
    return request.param  # type: ignore[no-any-return]


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
    """Stored metadata of a bundle's rows (its pending-action columns under their metadata names),
    in question order."""
    return [r for r in await all_metadata(db, order_by_creation=True) if r.get("pending_id") == pending_id]


async def all_metadata(db: Database, *, order_by_creation: bool = False) -> list[dict[str, Any]]:
    """Every message row's stored metadata, with its pending-action columns under their metadata
    names (`repository/message_fields.py`)."""
    order = (M.c.created_at, M.c.id) if order_by_creation else (M.c.id,)
    async with db.read() as conn:
        result = await conn.execute(select(M.c.id, *message_fields.COLUMNS).order_by(*order))
        return [{"id": r.id, **message_fields.metadata_of(r._mapping, where=r.id)} for r in result]


@dataclass
class ScriptedResumer:
    """The resume seam played by a script: records claims, answers with a fixed outcome."""

    outcome: ResumeOutcome
    claims: list[Claim] = field(default_factory=list)
    settle: bool = True

    async def resume(self, claim: Claim) -> ResumeOutcome:
        self.claims.append(claim)
        return self.outcome
