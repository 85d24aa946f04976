"""Turn-scoped pending derivation: the client-side mirror of the repository's current-turn rule.

Rows use the durable shape (the shape of the shared fixture): turns ``{id, started_at, created_at,
completed_at, metadata}`` and messages ``{id, turn_id, type, metadata}``. ``turn_row`` and
``message_row`` adapt the API's camelCase ``Turn`` / ``Message`` objects to it.

How the kit combines this derivation with the server's per-session projection (``session_pending``):

* The server projection (``pendingAction`` + ``revision``, merged through ``revision.merge``) says
  *whether* a session has a pending action and of which kind. It is computed from durable state the
  client cannot see: ``sessionTurns`` hides unpublished reservations, including an attempted one that
  is already the current turn. So once a projection is held, its kind wins over the derivation: an
  explicit null makes every pending-looking row inert, even one on the visible predecessor of a
  hidden attempted successor (the spec's "attempted successor reservation" scenario).
* The derivation says *which* bundles are active: pending rows of the current turn. It narrows the
  projection, never widens it. A ``PERMISSION`` projection means no active clarification either,
  because a clarification outranks a permission request within a session.
* If the projection says ``CLARIFICATION`` but the loaded history shows no active bundle, the history
  lags behind an event (a message in a turn not loaded yet). The kit then uses the server's own
  active bundle when it has one, else the pending rows whose turn is not in the loaded history.
* Without a projection (none received yet) the derivation alone answers; without turn history
  (not loaded, or failed) the projection alone answers, with the server's active bundle, if any.
* A terminal session (COMPLETED, FAILED, CANCELLED) has nothing pending either way.
"""

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

from frontend_py.kit.timestamps import parse_timestamp

CLARIFICATION = "CLARIFICATION"
PERMISSION = "PERMISSION"
TERMINAL_SESSION_STATES = ("COMPLETED", "FAILED", "CANCELLED")

_CLARIFICATION_TYPE = "clarification_request"
_PERMISSION_TYPE = "permission_request"


def is_truthy(value: object) -> bool:
    """The flag test shared with SQL: JSON ``true``, ``"true"``, ``"1"`` or ``1``, nothing else."""
    if value is True:
        return True
    if value is False or value is None:
        return False
    if isinstance(value, str):
        return value == "true" or value == "1"
    # ``type(...) is int`` keeps 1.0 out, matching the SQL text cast ('1.0' is not '1').
    return type(value) is int and value == 1


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    meta = row.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _referenced_turn_ids(messages: list[dict[str, Any]]) -> set[str]:
    referenced = set()
    for message in messages:
        turn_id = message.get("turn_id")
        if turn_id:
            referenced.add(turn_id)
    return referenced


def _is_reservation(turn: dict[str, Any]) -> bool:
    return is_truthy(_metadata(turn).get("prompt_dispatch_pending"))


def _is_authoritative(turn: dict[str, Any], referenced: set[str]) -> bool:
    if not _is_reservation(turn):
        return True
    return is_truthy(_metadata(turn).get("prompt_dispatch_attempted")) or turn.get("id") in referenced


def _order_key(turn: dict[str, Any]) -> tuple[int, int, str]:
    return (parse_timestamp(turn.get("started_at")), parse_timestamp(turn.get("created_at")), turn["id"])


def current_turn(turns: list[dict[str, Any]], messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The session's current turn: newest authoritative conversational turn, open ones first."""
    referenced = _referenced_turn_ids(messages)
    best: dict[str, Any] | None = None
    best_key: tuple[bool, tuple[int, int, str]] | None = None
    for turn in turns:
        if is_truthy(_metadata(turn).get("lifecycle_only")) or not _is_authoritative(turn, referenced):
            continue
        key = (turn.get("completed_at") is None, _order_key(turn))
        if best_key is None or key > best_key:
            best, best_key = turn, key
    return best


def visible_turns(turns: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Client turn history: unpublished reservations hidden until a message references them."""
    referenced = _referenced_turn_ids(messages)
    shown = [t for t in turns if not _is_reservation(t) or t.get("id") in referenced]
    return sorted(shown, key=_order_key)


def _is_pending(message: dict[str, Any]) -> bool:
    # Missing or empty status is the legacy spelling of pending; callers only ask about rows of the
    # current turn, which is what keeps legacy rows in older turns inert.
    # Stored statuses are lower case, compared exactly, as the server's SQL does: "Pending" is not
    # pending (API enum values are lower-cased once, in ``message_row``).
    status = _metadata(message).get("status")
    return status is None or status in ("", "pending")


def _current_pending_rows(
    session_state: str, turns: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if session_state in TERMINAL_SESSION_STATES:
        return []
    turn = current_turn(turns, messages)
    if turn is None:
        return []
    return [m for m in messages if m.get("turn_id") == turn["id"] and _is_pending(m)]


def _bundle_ids(rows: list[dict[str, Any]]) -> list[str]:
    ids = set()
    for row in rows:
        pending_id = _metadata(row).get("pending_id")
        if row.get("type") == _CLARIFICATION_TYPE and pending_id:
            ids.add(pending_id)
    return sorted(ids)


def active_pending_ids(
    session_state: str, turns: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> list[str]:
    """Sorted ids of the active clarification bundles: a pending row in the current turn, live session."""
    return _bundle_ids(_current_pending_rows(session_state, turns, messages))


def pending_action(
    session_state: str, turns: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> str | None:
    """``CLARIFICATION``, ``PERMISSION`` or None; a clarification outranks a permission request."""
    rows = _current_pending_rows(session_state, turns, messages)
    if _bundle_ids(rows):
        return CLARIFICATION
    for row in rows:
        if row.get("type") == _PERMISSION_TYPE:
            return PERMISSION
    return None


def session_pending(
    session_state: str,
    projection: dict[str, Any] | None,
    turns: list[dict[str, Any]] | None,
    messages: list[dict[str, Any]],
    server_active_ids: list[str] | None = None,
) -> tuple[str | None, list[str]]:
    """``(pending action, active bundle ids)`` combining the server projection with the derivation.

    ``projection`` is the held ``{"pendingAction", "revision"}`` or None when none was received;
    ``turns`` is None while turn history is unavailable; ``server_active_ids`` are the bundle ids
    the server reported active (``TaskSession.activeClarification``). See the module docstring.
    """
    if session_state in TERMINAL_SESSION_STATES:
        return (None, [])
    if projection is None:
        if turns is None:
            return (None, [])
        return (
            pending_action(session_state, turns, messages),
            active_pending_ids(session_state, turns, messages),
        )
    action = projection.get("pendingAction")
    if action != CLARIFICATION:
        return (action, [])
    if turns is not None:
        derived = active_pending_ids(session_state, turns, messages)
        if derived:
            return (action, derived)
    if server_active_ids:
        return (action, sorted(server_active_ids))
    if turns is None:
        return (action, [])
    known = set()
    for turn in turns:
        known.add(turn.get("id"))
    lagging = [m for m in messages if m.get("turn_id") not in known and _is_pending(m)]
    return (action, _bundle_ids(lagging))


def turn_row(turn: dict[str, Any]) -> dict[str, Any]:
    """An API ``Turn`` in the durable row shape (the server already hides unpublished reservations)."""
    return {
        "id": turn["id"],
        "started_at": turn.get("startedAt"),
        "created_at": turn.get("createdAt"),
        "completed_at": turn.get("completedAt"),
        "metadata": {"lifecycle_only": bool(turn.get("lifecycleOnly"))},
    }


def message_row(message: dict[str, Any]) -> dict[str, Any]:
    """An API ``Message`` in the durable row shape.

    A clarification's status comes from its ``clarification`` object. Other kinds read an optional
    top-level ``status`` when the server sends one; without it a permission request counts as
    pending in the current turn, the legacy rule, and a held projection still overrules it.
    """
    meta: dict[str, Any] = {}
    clarification = message.get("clarification")
    if isinstance(clarification, dict):
        meta["pending_id"] = clarification.get("pendingId")
        status = clarification.get("status")
    else:
        status = message.get("status")
    if isinstance(status, str):
        meta["status"] = status.lower()
    return {
        "id": message["id"],
        "turn_id": message.get("turnId"),
        "type": message.get("kind"),
        "metadata": meta,
    }
