"""Every clarification entry point asks its caller's authorizer, with the same scope, and has no
default: forgetting the authorizer is a programming error, never an open door."""

from __future__ import annotations

from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain.errors import Forbidden
from tests.lifecycle.support import Agent, new_session, running


async def test_every_entry_point_authorizes_with_the_task_and_the_session(db: Database) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        asked: list[tuple[str, str | None]] = []

        def record(task: str, session: str | None) -> None:
            asked.append((task, session))

        live = await Agent.ask(svc, session_id)
        await svc.pending.bundle(live.pending_id, authorize=record)
        assert await svc.pending.cancel(live.pending_id, authorize=record) is True
        other = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        await other.outcome()
        await svc.pending.respond(other.pending_id, [], rejected=True, authorize=record)
        await svc.pending.advance_task(task_id, "review", authorize=record)
        assert asked == [(task_id, session_id)] * 3 + [(task_id, None)]
        await live.close()
        await other.close()


async def test_a_refusing_authorizer_stops_cancel_before_anything_is_written(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)

        def refuse(_task: str, _session: str | None) -> None:
            raise Forbidden("not yours")

        with pytest.raises(Forbidden):
            await svc.pending.cancel(agent.pending_id, authorize=refuse)
        bundle = await svc.pending.bundle(agent.pending_id, authorize=lambda _t, _s: None)
        assert bundle is not None
        assert {r.status for r in bundle.rows} == {"pending"}
        await agent.close()


@pytest.mark.parametrize("call", ["bundle", "cancel", "respond", "advance_task"])
async def test_forgetting_the_authorizer_is_an_error(db: Database, call: str) -> None:
    async with running(db) as svc:
        args: dict[str, tuple[Any, ...]] = {
            "bundle": ("p",),
            "cancel": ("p",),
            "respond": ("p", []),
            "advance_task": ("t", "review"),
        }
        method = getattr(svc.pending, call)
        with pytest.raises(TypeError, match="authorize"):
            await method(*args[call], **({"rejected": True} if call == "respond" else {}))
