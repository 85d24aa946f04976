"""Clarification bundle writes that follow the one rule (expiry on terminal sessions for now)."""

from __future__ import annotations

from sqlalchemy import literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.sqlfuncs import json_update
from backend.db.tables import task_session_messages as M
from backend.domain.states import MESSAGE_KIND_CLARIFICATION, ClarificationStatus
from backend.repository.authority import current_turn_id, is_pending_status


async def expire_current_turn_bundles(conn: AsyncConnection, session_id: str) -> list[str]:
    """Expire every pending clarification row of the session's current turn; returns the changed ids.

    Called while the session enters a terminal state, before that transition is published, so no
    answerable question survives a finished session. Older turns are history and stay untouched.
    """
    result = await conn.execute(
        update(M)
        .where(
            M.c.session_id == session_id,
            M.c.type == MESSAGE_KIND_CLARIFICATION,
            M.c.turn_id == select(current_turn_id(literal(session_id))).scalar_subquery(),
            is_pending_status(M),
        )
        .values(
            metadata=json_update(M.c.metadata, {"status": ClarificationStatus.EXPIRED.value}),
            updated_at=utcnow(),
        )
        .returning(M.c.id)
    )
    return [row.id for row in result]
