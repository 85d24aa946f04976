"""The rows of pending actions (clarification questions, permission requests) as SQL conditions.

A pending action is a bundle: the message rows sharing one `pending_id`, of one kind. Every
lifecycle write (ask, detach, claim, settle, restore) is the same for both kinds, so it names its
rows through these conditions, built once per process over bound parameters: `b_session` (the
session whose rows a write may touch) and `b_pending_id` (one bundle). Callers pass both as execute
parameters (`bound`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, exists, select

from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.lifecycle import BundleRow
from backend.repository import message_fields
from backend.repository.authority import (
    current_turn_id,
    is_pending_action,
    is_pending_status,
    open_rows,
    session_is_live,
)

B_SESSION = bindparam("b_session", type_=S.c.id.type)
B_PENDING_ID = bindparam("b_pending_id", type_=M.c.id.type)
PID = M.c.pending_id
PENDING_ID_IS = PID == B_PENDING_ID
IN_CURRENT_TURN = M.c.turn_id == select(current_turn_id(B_SESSION)).scalar_subquery()
# The same rows found from the current turn's open rows: what a write of every active row of the
# session (not of one bundle) adds, so it never walks the turn's answered history.
OPEN_IN_CURRENT_TURN = M.c.id.in_(open_rows(B_SESSION, select(current_turn_id(B_SESSION)).scalar_subquery()))
SESSION_LIVE = exists().where(S.c.id == B_SESSION, session_is_live(S.c.state))

# The one named "active rows" condition: pending rows of a pending action of the current turn of the
# session `b_session` while that session is live (the one rule's definition of "active"), as the
# WHERE of every write that may only touch active rows.
ACTIVE_ROWS = and_(
    M.c.session_id == B_SESSION,
    is_pending_action(M),
    is_pending_status(M),
    IN_CURRENT_TURN,
    SESSION_LIVE,
)


def bound(session_id: str, pending_id: str | None = None) -> dict[str, str]:
    params = {"b_session": session_id}
    if pending_id is not None:
        params["b_pending_id"] = pending_id
    return params


# What a statement returning bundle rows returns (`bundle_row` reads these).
BUNDLE_ROW_COLUMNS = (M.c.id, M.c.session_id, M.c.turn_id, M.c.created_at, *message_fields.COLUMNS)


def bundle_row(row: Any) -> BundleRow:
    m = row._mapping
    return BundleRow(
        m["id"],
        m["session_id"],
        m["turn_id"],
        message_fields.metadata_of(m, where=f"message {m['id']}"),
        m["created_at"],
    )
