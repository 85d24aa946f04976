"""The task summary's pending action derived in SQL (the unit of work's one-statement reconciliation)
gives the same answer as the domain's `task_pending_action` over the same sessions, on both dialects."""

from __future__ import annotations

import itertools
import random

from sqlalchemy import update

from backend.db.engine import Database, utcnow
from backend.db.tables import task_sessions, task_status_summaries
from backend.domain.pending import task_pending_action
from backend.domain.states import SessionState
from backend.repository import messages, pending, summaries, turns
from backend.services.container import Services
from tests.services.support import ask, services_for

KINDS = (None, "clarification", "permission", "both")
Sessions = list[tuple[SessionState, str | None]]


async def _task_with(services: Services, db: Database, sessions: Sessions) -> str:
    task = await services.operations.create_task("derivation")
    for i, (state, kind) in enumerate(sessions):
        session = await services.operations.create_session(task.id, is_primary=i == 0, input_capable=True)
        await services.operations.start_turn(session.id)
        if kind in ("clarification", "both"):
            await ask(db, session.id, pending_id=f"p-{session.id}")
        if kind in ("permission", "both"):
            async with db.write() as conn:
                turn_id = await turns.current_turn(conn, session.id)
                assert turn_id is not None
                await messages.insert_message(
                    conn,
                    session_id=session.id,
                    turn_id=turn_id,
                    kind="permission_request",
                    author="agent",
                    content="may I?",
                    metadata={"status": "pending"},
                )
        async with db.write() as conn:  # the state as stored, whatever the path to it
            await conn.execute(
                update(task_sessions).where(task_sessions.c.id == session.id).values(state=state.value)
            )
    async with db.write() as conn:
        await conn.execute(
            task_status_summaries.insert().values(
                task_id=task.id, revision=1, pending_action="stale", fields={}, updated_at=utcnow()
            )
        )
    return task.id


def _cases() -> list[Sessions]:
    states = list(SessionState)
    singles = [[(s, k)] for s, k in itertools.product(states, KINDS)]
    rng = random.Random(11)
    several = [[(rng.choice(states), rng.choice(KINDS)) for _ in range(rng.randint(2, 3))] for _ in range(24)]
    return singles + several


async def test_sql_and_domain_derive_the_same_task_pending_action(db: Database) -> None:
    async with services_for(db) as services:
        for sessions in _cases():
            task_id = await _task_with(services, db, sessions)
            async with db.write() as conn:
                projections = [p for _, p in await pending.sessions_with_pending(conn, [task_id])]
                expected = task_pending_action(projections)
                await summaries.lock_summaries(conn, [task_id])
                written = await summaries.reconcile_held(conn, task_id)
                again = await summaries.reconcile_held(conn, task_id)
            assert written is not None, sessions  # "stale" is never a derived value
            assert (written.pending_action, written.revision) == (expected, 2), sessions
            assert again is None, sessions  # already current: no write, no new revision
