"""S45: the summary projector follows repository state, not the order its events arrive in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import update

from backend.db.engine import Database
from backend.db.tables import task_status_summaries
from backend.domain.pending import task_pending_action
from backend.repository import pending
from backend.services.container import Services
from backend.services.events_out import publish_session_change
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, running
from tests.resume.support import eventually
from tests.services.support import stored_summary


async def derived(svc: Services, task_id: str) -> str | None:
    async with svc.deps.db.read() as conn:
        pairs = await pending.sessions_with_pending(conn, [task_id])
    return task_pending_action([p for _, p in pairs])


async def projector_caught_up(svc: Services, db: Database) -> None:
    """Send a marker through the projector after everything else and wait until it was handled:
    the hub works through its events in order, so every earlier event was projected by then."""
    marker_task, marker_session = await new_session(svc, turn=False)
    await svc.summaries.refresh([marker_task])
    async with db.write() as conn:
        await conn.execute(
            update(task_status_summaries)
            .where(task_status_summaries.c.task_id == marker_task)
            .values(pending_action="permission")
        )
    await publish_session_change(
        svc.deps.bus, task_id=marker_task, session_id=marker_session, kind="session.state"
    )

    async def repaired() -> bool:
        held = await stored_summary(db, marker_task)
        return held is not None and held["pending_action"] is None

    for _ in range(250):
        if await repaired():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the projector never handled the marker event")


@pytest.mark.scenario("S45")
@pytest.mark.parametrize("survivor", ["pending", "none"])
async def test_projector_result_matches_repository_state_whatever_the_event_order(
    db: Database, survivor: str, kind: Kind
) -> None:
    async with running(db) as svc:
        await svc.live.start()
        try:
            task_id, session_id = await new_session(svc)
            first = await kind.ask(
                svc,
                session_id,
                qs=[{"prompt": "A?", "options": [{"label": "x"}, {"label": "y"}]}],
                tool_input={"command": "a"},
            )
            first.wait()
            await svc.summaries.refresh([task_id])
            published: list[Any] = []
            with svc.live.watch_summaries(lambda t: t == task_id) as mailbox:

                async def drain() -> None:
                    async for summary in mailbox:
                        published.append(summary)

                reader = asyncio.create_task(drain())
                # Two request identities, written close together: one ends, the other is asked (or
                # ends as well). Their events reach the projector in one burst.
                ask_second = kind.ask(
                    svc,
                    session_id,
                    qs=[{"prompt": "B?", "options": [{"label": "x"}, {"label": "y"}]}],
                    tool_input={"command": "b"},
                )
                cancelled, second = await asyncio.gather(
                    svc.pending.cancel(first.pending_id, authorize=trusted), ask_second
                )
                assert cancelled is True
                second.wait()
                if survivor == "none":
                    assert await svc.pending.cancel(second.pending_id, authorize=trusted) is True
                # A delayed duplicate arrives last and points the wrong way: the first (terminal)
                # request's event when a question survives, the second's "added" when none does.
                (misleading,) = [r.id for r in (first if survivor == "pending" else second).bundle.rows]  # type: ignore[union-attr]
                event = "message.updated" if survivor == "pending" else "message.added"
                await publish_session_change(
                    svc.deps.bus, task_id=task_id, session_id=session_id, kind=event, message_id=misleading
                )
                await projector_caught_up(svc, db)
                expected = kind.value.value if survivor == "pending" else None
                assert await derived(svc, task_id) == expected
                held = await stored_summary(db, task_id)
                assert held is not None
                assert held["pending_action"] == expected
                # Whatever the projector published for the task, the newest is the repository state
                # (when a question survives, the summary may never have changed at all).
                if survivor == "none":
                    await eventually(lambda: bool(published) and published[-1].revision == held["revision"])
                if published:
                    assert published[-1].pending_action == expected
                reader.cancel()
            for agent in (first, second):
                await agent.close()
        finally:
            await svc.live.stop()
