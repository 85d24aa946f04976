"""Requirements outside the numbered scenarios, on the live and summary paths: what a subscriber and
a task-list response carry when part of the work behind them failed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import delete, insert, update

from backend.api.auth import Principal
from backend.api.context import Context
from backend.api.schema import build_schema
from backend.db.engine import Database
from backend.db.tables import meta, task_status_summaries
from backend.domain.states import SessionState
from backend.repository.meta import EPOCH_KEY
from backend.services.events_out import publish_session_change
from backend.services.live import SessionChange
from backend.services.summaries import SUMMARY_CHANNEL
from tests.lifecycle.support import new_session, running
from tests.services.support import ask, services_for, stored_summary


async def next_change(mailbox: Any) -> SessionChange:
    change: SessionChange = await asyncio.wait_for(mailbox.get(), 5)
    return change


@pytest.mark.parametrize("cause", ["content-only", "re-read fails"])
async def test_session_events_carry_a_null_projection_for_content_only_updates_and_failed_rereads(
    db: Database, cause: str
) -> None:
    async with running(db) as svc:
        await svc.live.start()
        try:
            task_id, session_id = await new_session(svc)
            message_id = await ask(db, session_id)
            with svc.live.watch_session_events(session_id) as mailbox:
                # A normal update carries the re-read projection.
                await publish_session_change(
                    svc.deps.bus,
                    task_id=task_id,
                    session_id=session_id,
                    kind="message.updated",
                    message_id=message_id,
                )
                normal = await next_change(mailbox)
                assert normal.projection is not None
                assert normal.projection.pending_action == "clarification"
                if cause == "re-read fails":
                    async with db.write() as conn:
                        await conn.execute(delete(meta).where(meta.c.key == EPOCH_KEY))
                        await conn.execute(insert(meta).values(key=EPOCH_KEY, value="7x"))
                await publish_session_change(
                    svc.deps.bus,
                    task_id=task_id,
                    session_id=session_id,
                    kind="message.updated",
                    message_id=message_id,
                    content_only=cause == "content-only",
                )
                change = await next_change(mailbox)
            # The message itself still arrives, re-read; the projection is null (clients keep theirs).
            assert change.kind == "updated"
            assert change.message is not None
            assert change.message.id == message_id
            assert change.projection is None
        finally:
            await svc.live.stop()


async def test_a_repaired_summary_whose_publication_failed_is_still_in_the_response(db: Database) -> None:
    async with services_for(db, fault_points=("summary.publish",)) as services:
        task = await services.operations.create_task("t")
        session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
        await services.operations.set_session_state(session.id, SessionState.RUNNING)
        await services.operations.start_turn(session.id)
        await services.summaries.reconcile([task.id])
        await ask(db, session.id)
        async with db.write() as conn:  # stale: says nothing is pending
            await conn.execute(update(task_status_summaries).values(pending_action=None))
        published: list[dict[str, Any]] = []
        ready = asyncio.Event()

        async def listen() -> None:
            async with services.deps.bus.subscribe(SUMMARY_CHANNEL) as events:
                ready.set()
                async for e in events:
                    published.append(e)

        listener = asyncio.create_task(listen())
        await ready.wait()
        try:
            schema = build_schema()
            result = await schema.execute(
                "{ tasks { id summary { revision pendingAction } } }",
                context_value=Context(services, Principal("admin", "admin")),
            )
            assert result.errors is None
            assert result.data is not None
            (row,) = [t for t in result.data["tasks"] if t["id"] == task.id]
            held = await stored_summary(db, task.id)
            assert held is not None
            # The repair was persisted, its publication failed, and the response carries it anyway.
            assert held["pending_action"] == "clarification"
            assert row["summary"] == {"revision": held["revision"], "pendingAction": "CLARIFICATION"}
            await asyncio.sleep(0.1)
            assert published == []
        finally:
            listener.cancel()
