"""The one rule: which turn is current and which pending-action rows are active, as SQL expressions.

Every consumer (projection, workflow guard, detach, expiry, response claim, recovery) builds its
query from these functions, so SQLite and PostgreSQL and every code path agree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, case, exists, func, literal_column, not_, or_, select
from sqlalchemy.sql.selectable import ScalarSelect

from backend.db.sqlfuncs import json_flag
from backend.db.tables import open_pending_rows as OPEN
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_session_turns as T
from backend.domain.states import (
    MESSAGE_KIND_CLARIFICATION,
    MESSAGE_KIND_PERMISSION,
    TERMINAL_SESSION_STATES,
    ClarificationStatus,
    PendingActionKind,
)

Col = ColumnElement[Any]

# The turn metadata keys the rule reads (reservations write them; see repository/reservations.py).
PENDING = "prompt_dispatch_pending"
ATTEMPTED = "prompt_dispatch_attempted"
# Aliases are built once per process: building one copies every column of its table, which was the
# larger part of building a statement through the one rule. Each use sits in its own subquery, so
# sharing the alias object between statements (or twice in one) changes nothing in the SQL.
_EVIDENCE = M.alias("evidence")
_OPEN_TURN = T.alias("open_turn")
_CLOSED_TURN = T.alias("closed_turn")
_OPEN_OF_KIND = {
    kind: OPEN.alias(f"open_{kind}") for kind in (MESSAGE_KIND_CLARIFICATION, MESSAGE_KIND_PERMISSION)
}


def has_message_evidence(turn_id: Col) -> ColumnElement[bool]:
    return exists().where(_EVIDENCE.c.turn_id == turn_id)


def is_authoritative_turn(turn: Any) -> ColumnElement[bool]:
    """Conversational, and not an unpublished reservation unless attempted or referenced by a message."""
    md = turn.c.metadata
    return and_(
        not_(json_flag(md, "lifecycle_only")),
        or_(
            not_(json_flag(md, PENDING)),
            json_flag(md, ATTEMPTED),
            has_message_evidence(turn.c.id),
        ),
    )


def is_visible_turn(turn: Any) -> ColumnElement[bool]:
    """Client turn history hides unpublished reservations until published or referenced by a message."""
    return or_(not_(json_flag(turn.c.metadata, PENDING)), has_message_evidence(turn.c.id))


def _newest_authoritative(session_id: Col, *, open_turns: bool) -> ScalarSelect[Any]:
    t = _OPEN_TURN if open_turns else _CLOSED_TURN
    state = t.c.completed_at.is_(None) if open_turns else t.c.completed_at.is_not(None)
    return (
        select(t.c.id)
        .where(t.c.session_id == session_id, state, is_authoritative_turn(t))
        .order_by(t.c.started_at.desc(), t.c.created_at.desc(), t.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )


def current_turn_id(session_id: Col) -> ColumnElement[Any]:
    """Open before completed, then started_at, created_at, id descending.

    Written as two index-ordered LIMIT 1 lookups rather than one ORDER BY over an expression, so the
    cost does not grow with the session's turn history.
    """
    return func.coalesce(
        _newest_authoritative(session_id, open_turns=True),
        _newest_authoritative(session_id, open_turns=False),
    )


def is_pending_status(message: Any) -> ColumnElement[bool]:
    """Status `pending`, or missing/empty (legacy); callers must already restrict to the current turn.

    Rendered with literal constants, as the triggers that keep `open_pending_rows` test it (migration
    0007)."""
    return func.coalesce(message.c.status, literal_column("''")).in_(
        [literal_column(f"'{ClarificationStatus.PENDING.value}'"), literal_column("''")]
    )


def session_is_live(state: Col) -> ColumnElement[bool]:
    return state.not_in(sorted(TERMINAL_SESSION_STATES))


def is_kind(message: Any, kind: str) -> ColumnElement[bool]:
    """A clarification row belongs to a bundle only through a non-empty pending_id; without one it is
    unanswerable history and must not raise a question indicator."""
    is_type: ColumnElement[bool] = message.c.type == kind
    if kind != MESSAGE_KIND_CLARIFICATION:
        return is_type
    return and_(message.c.type == kind, func.coalesce(message.c.pending_id, "") != "")


# The message types whose rows form pending actions (bundles) with one lifecycle.
PENDING_ACTION_TYPES = (MESSAGE_KIND_CLARIFICATION, MESSAGE_KIND_PERMISSION)


def is_pending_action(message: Any) -> ColumnElement[bool]:
    """A row of a pending action of either kind: only through a non-empty pending_id (without one, a
    row is unanswerable history)."""
    return and_(message.c.type.in_(PENDING_ACTION_TYPES), func.coalesce(message.c.pending_id, "") != "")


def is_pending_row(message: Any) -> ColumnElement[bool]:
    """A row `open_pending_rows` holds: of a pending action's kind (`is_kind`) with a pending status.
    The triggers of migration 0007 keep that table to exactly these rows; this is the same condition
    as SQL, for the test that checks them against each other."""
    return and_(
        or_(*(is_kind(message, kind) for kind in PENDING_ACTION_TYPES)),
        is_pending_status(message),
    )


def open_rows(session_id: Col, turn_id: Col) -> Any:
    """The ids of the pending rows of this turn of this session, read from `open_pending_rows` (an
    index-sized lookup however long the turn's answered history)."""
    return select(OPEN.c.message_id).where(OPEN.c.turn_id == turn_id, OPEN.c.session_id == session_id)


def has_pending_kind(session_id: Col, turn_id: Col, kind: str) -> ColumnElement[bool]:
    o = _OPEN_OF_KIND.get(kind)
    if o is None:
        o = OPEN.alias(f"open_{kind}")
    return exists().where(o.c.turn_id == turn_id, o.c.type == kind, o.c.session_id == session_id)


def pending_action(session_id: Col, state: Col, turn_id: Col) -> ColumnElement[Any]:
    """Per-session projection: clarification outranks permission; terminal sessions are quarantined."""
    return case(
        (not_(session_is_live(state)), None),
        (
            has_pending_kind(session_id, turn_id, MESSAGE_KIND_CLARIFICATION),
            PendingActionKind.CLARIFICATION.value,
        ),
        (has_pending_kind(session_id, turn_id, MESSAGE_KIND_PERMISSION), PendingActionKind.PERMISSION.value),
        else_=None,
    )


def active_pending_rows(
    message: Any,
    session_state: Col,
    types: tuple[str, ...] = PENDING_ACTION_TYPES,
    *,
    session_id: Col | None = None,
) -> ColumnElement[bool]:
    """Rows of active pending actions (of these message types): pending, in the current turn of a
    live session.

    `session_id`: the one session the caller restricts `message` to (a bound parameter); the rows are
    then found from that session's current turn's open rows (`open_rows`), never by walking the
    turn's answered history. Without it the condition is asked of each message row (correlated to
    it, one level deep: a subquery nested deeper would not correlate)."""
    of_type: ColumnElement[bool] = (
        is_pending_action(message)
        if types == PENDING_ACTION_TYPES
        else and_(is_pending_action(message), message.c.type.in_(types))
    )
    if session_id is None:
        in_current_turn = message.c.turn_id == current_turn_id(message.c.session_id)
    else:
        # An open row names its message's own turn (the triggers copy it), so this is also the
        # current-turn test: the turn is derived once.
        in_current_turn = message.c.id.in_(open_rows(session_id, current_turn_id(session_id)))
    return and_(in_current_turn, of_type, is_pending_status(message), session_is_live(session_state))
