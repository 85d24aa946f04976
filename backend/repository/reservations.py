"""Successor-turn reservations for detached resumes: reserve, attempt marker, rollback, publish, recovery.

A reservation is a turn row whose metadata carries `prompt_dispatch_pending` plus the recovery
identity of the claim it resumes. Whether it counts as the current turn is decided by authority.py
alone (unpublished and unattempted without message evidence: not authoritative). Every write here is
one conditional statement that re-checks the reservation is still unpublished, so a stale caller
changes nothing. Recovery reads and writes are set-based: a constant number of statements per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, not_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.sqlfuncs import json_flag, json_update
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_session_turns as T
from backend.db.tables import task_sessions as S
from backend.domain.records import TurnRecord
from backend.repository import message_fields, rows, turns
from backend.repository.authority import ATTEMPTED, PENDING, has_message_evidence

__all__ = ["ATTEMPTED", "PENDING"]  # defined beside the rule that reads them
SOURCE_PENDING_ID = "prompt_dispatch_clarification_pending_id"
SOURCE_TURN_ID = "prompt_dispatch_clarification_turn_id"
SOURCE_MESSAGE_IDS = "prompt_dispatch_clarification_message_ids"
CLAIM_ID = "prompt_dispatch_claim_id"
ORIGIN = "prompt_dispatch_origin"
START_EVENT_PENDING = "prompt_dispatch_start_event_pending"

# Every private key a reservation may carry; public events and published turns carry none of them.
RECOVERY_KEYS = (PENDING, ATTEMPTED, SOURCE_PENDING_ID, SOURCE_TURN_ID, SOURCE_MESSAGE_IDS, CLAIM_ID, ORIGIN)
DISPATCH_KEYS = (*RECOVERY_KEYS, START_EVENT_PENDING)


def _unpublished() -> Any:
    return json_flag(T.c.metadata, PENDING)


# --- the resume path ----------------------------------------------------------------------------


async def reserve(
    conn: AsyncConnection,
    session_id: str,
    *,
    turn_id: str,
    source_turn_id: str,
    pending_id: str,
    message_ids: Sequence[str],
    claim_id: str | None,
    origin: str,
) -> TurnRecord:
    """The unpublished successor; caller holds the session lock and checked admission."""
    metadata: dict[str, Any] = {
        PENDING: True,
        SOURCE_TURN_ID: source_turn_id,
        SOURCE_PENDING_ID: pending_id,
        SOURCE_MESSAGE_IDS: list(message_ids),
        ORIGIN: origin,
    }
    if claim_id is not None:
        metadata[CLAIM_ID] = claim_id
    return await turns.insert_turn(conn, session_id, metadata, turn_id=turn_id)


async def mark_attempted(conn: AsyncConnection, turn_id: str) -> bool:
    """The at-most-once boundary: from here on the successor is authoritative and never deleted."""
    result = await conn.execute(
        update(T)
        .where(T.c.id == turn_id, _unpublished())
        .values(metadata=json_update(T.c.metadata, {ATTEMPTED: True}))
    )
    return result.rowcount == 1


async def delete_unpublished(conn: AsyncConnection, turn_id: str) -> bool:
    """Roll back a reservation that provably never reached the agent. Refuses (False) once it was
    published, moved to the outbox, or referenced by a message (evidence of acceptance)."""
    result = await conn.execute(
        delete(T).where(
            T.c.id == turn_id,
            _unpublished(),
            not_(json_flag(T.c.metadata, START_EVENT_PENDING)),
            not_(has_message_evidence(T.c.id)),
        )
    )
    return result.rowcount == 1


async def clear_recovery(conn: AsyncConnection, turn_id: str) -> bool:
    """After the bus accepted `turn.started`: the successor becomes an ordinary published turn."""
    result = await conn.execute(
        update(T)
        .where(T.c.id == turn_id, _unpublished())
        .values(metadata=json_update(T.c.metadata, remove=DISPATCH_KEYS))
    )
    if result.rowcount != 1:
        return False
    await turns.close_predecessors(conn, [turn_id])
    return True


async def move_to_outbox(conn: AsyncConnection, turn_ids: Sequence[str]) -> list[str]:
    """Replace the recovery metadata of accepted or ambiguous reservations with the start-event
    outbox marker, in one statement; returns the ids changed."""
    if not turn_ids:
        return []
    result = await conn.execute(
        update(T)
        .where(T.c.id.in_(list(turn_ids)), _unpublished())
        .values(metadata=json_update(T.c.metadata, {START_EVENT_PENDING: True}, remove=RECOVERY_KEYS))
        .returning(T.c.id)
    )
    moved = [r.id for r in result]
    # The successor is kept (accepted or ambiguous): it is accepted work, like a started turn.
    await turns.close_predecessors(conn, moved)
    return moved


async def live_reservation(conn: AsyncConnection, session_id: str) -> str | None:
    """An unresolved reservation of the session (any process's), oldest first."""
    row = (
        await conn.execute(
            select(T.c.id)
            .where(T.c.session_id == session_id, _unpublished())
            .order_by(T.c.started_at, T.c.id)
            .limit(1)
        )
    ).first()
    return None if row is None else str(row.id)


async def source_rows(conn: AsyncConnection, message_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The question rows a resume prompt answers (metadata only), in question order."""
    if not message_ids:
        return []
    result = await conn.execute(select(M.c.id, *message_fields.COLUMNS).where(M.c.id.in_(list(message_ids))))
    found = [message_fields.metadata_of(r._mapping, where=f"message {r.id}") for r in result]

    def index(md: dict[str, Any]) -> int:
        value = md.get("question_index")
        return value if isinstance(value, int) else 0

    return sorted(found, key=index)


async def agent_activity_since(conn: AsyncConnection, session_id: str, since: Any) -> bool:
    """Did the agent post anything in the session after `since`? (watchdog preflight, any process)"""
    row = (
        await conn.execute(
            select(M.c.id)
            .where(M.c.session_id == session_id, M.c.author == "agent", M.c.created_at > since)
            .limit(1)
        )
    ).first()
    return row is not None


# --- startup recovery ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredReservation:
    id: str
    session_id: str
    task_id: str
    metadata: dict[str, Any]
    has_evidence: bool


async def stored_reservations(
    conn: AsyncConnection, *, after: str = "", limit: int = 1000
) -> list[StoredReservation]:
    """One page of unpublished reservations (keyset by id), with their message evidence, one statement."""
    query = (
        select(
            T.c.id,
            T.c.session_id,
            T.c.metadata,
            S.c.task_id,
            has_message_evidence(T.c.id).label("has_evidence"),
        )
        .join(S, S.c.id == T.c.session_id)
        .where(_unpublished(), T.c.id > after)
        .order_by(T.c.id)
        .limit(limit)
    )
    # Only object metadata can carry the reservation marker the query selects on, so CorruptData here
    # means the database changed under us: it fails recovery loudly instead of being papered over.
    return [
        StoredReservation(
            r.id,
            r.session_id,
            r.task_id,
            rows.metadata_of(r.metadata, where=f"turn {r.id}"),
            bool(r.has_evidence),
        )
        for r in await conn.execute(query)
    ]


async def claimed_row_facts(
    conn: AsyncConnection, message_ids: Sequence[str]
) -> dict[str, tuple[str, str, str | None]]:
    """message id -> (session id, turn id, pending id) for the rows that still exist; one statement."""
    if not message_ids:
        return {}
    result = await conn.execute(
        select(M.c.id, M.c.session_id, M.c.turn_id, M.c.pending_id).where(M.c.id.in_(list(message_ids)))
    )
    return {r.id: (r.session_id, r.turn_id, r.pending_id) for r in result}


async def delete_empty(conn: AsyncConnection, turn_ids: Sequence[str]) -> list[str]:
    """Delete reservations that are still unattempted and unreferenced; one statement."""
    if not turn_ids:
        return []
    result = await conn.execute(
        delete(T)
        .where(
            T.c.id.in_(list(turn_ids)),
            _unpublished(),
            not_(json_flag(T.c.metadata, ATTEMPTED)),
            not_(has_message_evidence(T.c.id)),
        )
        .returning(T.c.id)
    )
    return [r.id for r in result]


@dataclass(frozen=True, slots=True)
class OutboxTurn:
    id: str
    session_id: str
    task_id: str
    completed: bool


async def outbox(conn: AsyncConnection, *, after: str = "", limit: int = 1000) -> list[OutboxTurn]:
    """One page of turns whose start event still has to reach the bus."""
    query = (
        select(T.c.id, T.c.session_id, T.c.completed_at, S.c.task_id)
        .join(S, S.c.id == T.c.session_id)
        .where(json_flag(T.c.metadata, START_EVENT_PENDING), T.c.id > after)
        .order_by(T.c.id)
        .limit(limit)
    )
    return [
        OutboxTurn(r.id, r.session_id, r.task_id, r.completed_at is not None)
        for r in await conn.execute(query)
    ]


async def clear_outbox(conn: AsyncConnection, turn_ids: Sequence[str]) -> int:
    if not turn_ids:
        return 0
    result = await conn.execute(
        update(T)
        .where(and_(T.c.id.in_(list(turn_ids)), json_flag(T.c.metadata, START_EVENT_PENDING)))
        .values(metadata=json_update(T.c.metadata, remove=(START_EVENT_PENDING,)))
    )
    return int(result.rowcount)
