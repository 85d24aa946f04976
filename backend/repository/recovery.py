"""The SQL of startup recovery for clarification rows: stranded delivery intents (restored while
their turn is current in a live session, retired otherwise) and rows still marked attached to a
waiter whose process is gone. Run only before the server admits traffic (`services/recovery.py`,
`services/resume_recovery.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import exists, false, not_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.sqlfuncs import json_flag, json_text, json_update
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.lifecycle import BundleRow
from backend.repository.authority import (
    PENDING_ACTION_TYPES,
    active_pending_rows,
    current_turn_id,
    is_pending_status,
    session_is_live,
)
from backend.repository.claims import RESTORE_COLUMNS, RESTORE_REMOVES
from backend.repository.pending_rows import BUNDLE_ROW_COLUMNS, bundle_row


async def delivery_intents(conn: AsyncConnection) -> list[BundleRow]:
    """Every row still carrying a durable delivery intent (startup only)."""
    result = await conn.execute(
        select(*BUNDLE_ROW_COLUMNS).where(M.c.type.in_(PENDING_ACTION_TYPES), M.c.delivery_pending)
    )
    return [bundle_row(r) for r in result]


async def restore_intents(conn: AsyncConnection, message_ids: Sequence[str]) -> list[tuple[str, str]]:
    """Restore intent rows whose turn is still current in a live session; (message id, session id)."""
    if not message_ids:
        return []
    result = await conn.execute(
        update(M)
        .where(
            M.c.id.in_(list(message_ids)),
            M.c.delivery_pending,
            M.c.turn_id == current_turn_id(M.c.session_id),
            exists().where(S.c.id == M.c.session_id, session_is_live(S.c.state)),
        )
        .values(
            **RESTORE_COLUMNS,
            metadata=json_update(M.c.metadata, remove=RESTORE_REMOVES),
            updated_at=utcnow(),
        )
        .returning(M.c.id, M.c.session_id)
    )
    return [(r.id, r.session_id) for r in result]


async def retire_intents(conn: AsyncConnection, message_ids: Sequence[str]) -> list[tuple[str, str]]:
    """Remove the intent from rows that may not become active again; they stay terminal."""
    if not message_ids:
        return []
    result = await conn.execute(
        update(M)
        .where(M.c.id.in_(list(message_ids)), M.c.delivery_pending)
        .values(delivery_pending=false())
        .returning(M.c.id, M.c.session_id)
    )
    return [(r.id, r.session_id) for r in result]


async def attached_waiter_rows(conn: AsyncConnection) -> list[tuple[str, str, str | None]]:
    """(message id, session id, waiter instance) of pending current-turn rows still marked attached."""
    result = await conn.execute(
        select(M.c.id, M.c.session_id, json_text(M.c.metadata, "waiter_instance").label("instance"))
        .join(S, S.c.id == M.c.session_id)
        .where(
            active_pending_rows(M, S.c.state),
            not_(json_flag(M.c.metadata, "agent_disconnected")),
        )
    )
    return [(r.id, r.session_id, r.instance) for r in result]


async def detach_rows(conn: AsyncConnection, message_ids: Sequence[str]) -> list[tuple[str, str]]:
    """Detach these rows if they are still pending, attached and current (recovery of dead waiters)."""
    if not message_ids:
        return []
    result = await conn.execute(
        update(M)
        .where(
            M.c.id.in_(list(message_ids)),
            is_pending_status(M),
            not_(json_flag(M.c.metadata, "agent_disconnected")),
            M.c.turn_id == current_turn_id(M.c.session_id),
        )
        .values(metadata=json_update(M.c.metadata, {"agent_disconnected": True}))
        .returning(M.c.id, M.c.session_id)
    )
    return [(r.id, r.session_id) for r in result]
