"""Clarification bundle reads and writes; every condition on "current" comes from authority.py.

Each write is one conditional statement whose WHERE re-checks what the caller decided on (pending
status, current-turn ownership, live session, claim identity), so a stale decision changes nothing.
Callers run inside a unit of work (`services/uow.py`), which holds the session lock and bumps the
pending sequence of every session it touched once, at commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import CTE, ColumnElement, Select, bindparam, exists, func, not_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.prepared import Prepared
from backend.db.sqlfuncs import json_flag, json_text, json_update
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.errors import CorruptData, NotFound
from backend.domain.ids import new_id
from backend.domain.lifecycle import BundleRow, Spec
from backend.domain.records import MessageRecord, SessionRecord
from backend.domain.rule_scopes import RuleRecord
from backend.domain.states import MESSAGE_KIND_CLARIFICATION, ClarificationStatus, SessionState
from backend.repository import bumped, message_fields, permission_rules, reach, rows, summaries, tasks
from backend.repository.authority import (
    PENDING_ACTION_TYPES,
    active_pending_rows,
    current_turn_id,
    is_pending_action,
    is_pending_status,
    session_is_live,
)
from backend.repository.locks import lock_key
from backend.repository.pending_rows import (
    ACTIVE_ROWS,
    B_SESSION,
    OPEN_IN_CURRENT_TURN,
    PENDING_ID_IS,
    PID,
    bound,
    bundle_row,
)

# --- statements built once per process (only bound values change between calls) ----------------

_SESSION_OF_BUNDLE = (
    select(M.c.session_id)
    .where(PENDING_ID_IS, M.c.type.in_(PENDING_ACTION_TYPES))
    .order_by(M.c.created_at, M.c.id)
    .limit(1)
)

_SESSION_OF_BUNDLE_P = Prepared(_SESSION_OF_BUNDLE)
# PostgreSQL: the same, and its session's lock taken in the same statement (the LIMIT keeps the
# subquery whole, so the lock is taken for the one row found).
_FOUND = _SESSION_OF_BUNDLE.subquery("found")
_FOUND_LOCKED = (
    select(_FOUND.c.session_id, func.pg_advisory_xact_lock(lock_key(_FOUND.c.session_id)).label("locked"))
    .cte("found_locked")
    .prefix_with("MATERIALIZED")
)
# ... and then its task's summary row held.
_LOCK_SESSION_OF_BUNDLE = Prepared(summaries.then_hold_summary(_FOUND_LOCKED))


def _bundle_facts(where: ColumnElement[bool]) -> Any:
    return (
        select(
            M.c.id,
            M.c.session_id,
            M.c.turn_id,
            M.c.created_at,
            *message_fields.COLUMNS,
            S.c.task_id,
            S.c.state,
            current_turn_id(M.c.session_id).label("current_turn"),
        )
        .join(S, S.c.id == M.c.session_id)
        .where(where, M.c.type.in_(PENDING_ACTION_TYPES))
        .order_by(M.c.created_at, M.c.id)
    )


_BUNDLE_FACTS_ONE = Prepared(_bundle_facts(PENDING_ID_IS))
_BUNDLE_FACTS = _bundle_facts(PID.in_(bindparam("b_pending_ids", expanding=True)))

_ACTIVE_BY_SIGNATURE = (
    select(PID.label("pending_id"))
    .where(
        M.c.session_id == B_SESSION,
        active_pending_rows(
            M, select(S.c.state).where(S.c.id == B_SESSION).scalar_subquery(), session_id=B_SESSION
        ),
        json_text(M.c.metadata, "bundle_signature") == bindparam("b_signature"),
    )
    .limit(1)
)


# What an ask needs, in one statement: the session, its current turn, and the active bundle an
# identical ask would re-attach to (only an active bundle qualifies: of the current turn, pending,
# in a live session); for a permission request, also its task's project and the rules that may decide
# it (`permission_rules.with_candidates`).
def _ask_context_select(*, rules: bool) -> Select[Any]:
    columns: list[Any] = [
        S,
        current_turn_id(S.c.id).label("current_turn"),
        _ACTIVE_BY_SIGNATURE.scalar_subquery().label("reusable"),
    ]
    if rules:
        columns.append(permission_rules.project_of(S.c.task_id))
    return select(*columns).where(S.c.id == B_SESSION)


def _ask_context_cte(*, rules: bool) -> CTE:
    return _ask_context_select(rules=rules).cte("ask_context").prefix_with("MATERIALIZED")


_ASK_CONTEXT = Prepared(_ask_context_select(rules=False))
_ASK_CONTEXT_CTE = _ask_context_cte(rules=True)
_ASK_CONTEXT_WITH_RULES = Prepared(
    permission_rules.with_candidates(_ASK_CONTEXT_CTE, list(_ASK_CONTEXT_CTE.c))
)
# The columns a new message row is written with (`_row_values`).
_ROW_COLUMNS = (
    "id",
    "session_id",
    "turn_id",
    "type",
    "author",
    "content",
    "metadata",
    "pending_id",
    "status",
    "claim_id",
    "delivery_pending",
    "created_at",
    "updated_at",
)
_INSERT_ROW_STATEMENT = M.insert().values({c: bindparam(f"b_{c}", type_=M.c[c].type) for c in _ROW_COLUMNS})
# PostgreSQL: the row and the session's new state (with its sequence bump) in one statement.
_INSERT_AND_SET_STATE = Prepared(
    select(_INSERT_ROW_STATEMENT.returning(M.c.id).cte("inserted").c.id).add_cte(
        update(S)
        .where(S.c.id == B_SESSION)
        .values(
            state=bindparam("b_state", type_=S.c.state.type),
            pending_seq=S.c.pending_seq + 1,
            updated_at=bindparam("b_updated_at", type_=S.c.updated_at.type),
        )
        .returning(S.c.id)
        .cte("state_set")
    )
)
_INSERT_ROW = Prepared(_INSERT_ROW_STATEMENT)


# --- reads --------------------------------------------------------------------------------------


async def session_of_bundle(conn: AsyncConnection, pending_id: str) -> str | None:
    """The session a bundle lives in (its first row's); the caller locks it, then reads the bundle."""
    row = await _SESSION_OF_BUNDLE_P.first(conn, {"b_pending_id": pending_id})
    return None if row is None else str(row.session_id)


async def lock_session_of_bundle(conn: AsyncConnection, pending_id: str) -> tuple[str | None, bool]:
    """`session_of_bundle`, and on PostgreSQL its session's lock taken in the same statement, then
    its task's summary row held (if it has one): (the session, whether it is now locked and its
    summary held). A bundle's session never changes, so what the caller reads next (a new snapshot,
    after the lock) is as fresh as after a separate lock."""
    if conn.dialect.name != "postgresql":
        return await session_of_bundle(conn, pending_id), False
    row = await _LOCK_SESSION_OF_BUNDLE.first(conn, {"b_pending_id": pending_id})
    if row is None:
        return None, False
    return str(row.session_id), True


async def bundle_facts(
    conn: AsyncConnection, pending_ids: Sequence[str]
) -> dict[str, tuple[list[BundleRow], str, str, str | None]]:
    """Rows of many bundles in one statement: pending_id -> (rows, task_id, session_state, current turn).

    The session facts come from the bundle's first row; a bundle spanning sessions is refused by the
    domain's turn identity rule, not silently merged.
    """
    if not pending_ids:
        return {}
    out: dict[str, tuple[list[BundleRow], str, str, str | None]] = {}
    ids = list(dict.fromkeys(pending_ids))
    found: Any = (
        await _BUNDLE_FACTS_ONE.rows(conn, {"b_pending_id": ids[0]})
        if len(ids) == 1
        else await conn.execute(_BUNDLE_FACTS, {"b_pending_ids": ids})
    )
    for row in found:
        entry = out.get(row.pending_id)
        if entry is None:
            current = None if row.current_turn is None else str(row.current_turn)
            entry = out[row.pending_id] = ([], row.task_id, row.state, current)
        entry[0].append(bundle_row(row))
    for rows_, *_ in out.values():
        rows_.sort(key=lambda r: (_index(r), r.id))
    return out


def _index(row: BundleRow) -> int:
    value = row.metadata.get("question_index")
    return value if isinstance(value, int) else 0


async def active_pending_ids_for_sessions(
    conn: AsyncConnection, session_ids: Sequence[str], message_type: str = MESSAGE_KIND_CLARIFICATION
) -> dict[str, list[str]]:
    """session_id -> pending ids of its active bundles of this message type, newest first; one
    statement for the batch."""
    if not session_ids:
        return {}
    pid = M.c.pending_id
    query = (
        select(M.c.session_id, pid.label("pending_id"), func.max(M.c.created_at).label("newest"))
        .join(S, S.c.id == M.c.session_id)
        .where(
            M.c.session_id.in_(list(dict.fromkeys(session_ids))),
            active_pending_rows(M, S.c.state, (message_type,)),
        )
        .group_by(M.c.session_id, pid)
    )
    found: dict[str, list[tuple[Any, str]]] = {}
    for row in await conn.execute(query):
        if not isinstance(row.pending_id, str) or not row.pending_id:
            raise CorruptData(f"session {row.session_id}: an active clarification row has no pending_id")
        found.setdefault(row.session_id, []).append((row.newest, row.pending_id))
    return {s: [p for _, p in sorted(v, key=lambda x: (x[0], x[1]), reverse=True)] for s, v in found.items()}


async def ask_context(
    conn: AsyncConnection, session_id: str, signature: str
) -> tuple[SessionRecord, str | None, str | None]:
    """(session, its current turn, the active bundle with this signature) in one statement."""
    found = await ask_context_with_rules(conn, session_id, signature, None)
    return found.session, found.turn_id, found.reusable


async def ask_context_with_rules(
    conn: AsyncConnection, session_id: str, signature: str, rules: Mapping[str, Any] | None
) -> AskContext:
    """`ask_context`, and with `rules` (`permission_rules.candidate_params`) the rules that may
    decide the ask, in the same statement."""
    params = {"b_session": session_id, "b_signature": signature}
    if rules is None:
        row = await _ASK_CONTEXT.first(conn, params)
        found = [] if row is None else [row]
    else:
        found = await _ASK_CONTEXT_WITH_RULES.rows(conn, {**params, **rules})
    if not found:
        raise NotFound("session", session_id)
    return _ask_context(found)


def _ask_context(found: Sequence[Any]) -> AskContext:
    row = found[0]
    turn = None if row.current_turn is None else str(row.current_turn)
    rules, project = permission_rules.candidates_of(found)
    reusable = None if row.reusable is None else str(row.reusable)
    return AskContext(rows.session(row), turn, reusable, rules=rules, project=project)


# --- ask ----------------------------------------------------------------------------------------


def _bundle_records(
    session_id: str,
    turn_id: str,
    pending_id: str,
    specs: Sequence[Spec],
    context: str | None,
    signature: str,
    waiter_id: str,
    waiter_instance: str,
) -> list[MessageRecord]:
    now = utcnow()
    records: list[MessageRecord] = []
    for i, spec in enumerate(specs):
        metadata: dict[str, Any] = {
            "pending_id": pending_id,
            **spec.row_metadata(),
            "question_index": i,
            "question_total": len(specs),
            "context": context,
            "status": ClarificationStatus.PENDING.value,
            "agent_disconnected": False,
            # Only the last row of a bundle requests input (kandev-notes "Shapes").
            "requests_input": i == len(specs) - 1,
            "bundle_signature": signature,
            "waiter_id": waiter_id,
            "waiter_instance": waiter_instance,
        }
        records.append(
            MessageRecord(
                new_id(), session_id, turn_id, spec.message_type, "agent", spec.content, metadata, now, now
            )
        )
    return records


def _row_values(r: MessageRecord) -> dict[str, Any]:
    fields = message_fields.values_of(r.metadata)
    return {
        "b_id": r.id,
        "b_session_id": r.session_id,
        "b_turn_id": r.turn_id,
        "b_type": r.type,
        "b_author": r.author,
        "b_content": r.content,
        **{f"b_{name}": value for name, value in fields.items()},
        "b_created_at": r.created_at,
        "b_updated_at": r.updated_at,
    }


async def insert_bundle(
    conn: AsyncConnection,
    *,
    session_id: str,
    turn_id: str,
    pending_id: str,
    questions: Sequence[Spec],
    context: str | None,
    signature: str,
    waiter_id: str,
    waiter_instance: str,
    state: str | None = None,
) -> list[MessageRecord]:
    """One row per question (a permission request: one row) in one multi-row INSERT: the bundle is
    written whole or not at all.

    `state`: also set the session's state and bump its sequence (`tasks.set_session_state(...,
    bump=True)`, noted for the unit of work), in the same statement on PostgreSQL for a one-question
    bundle."""
    records = _bundle_records(
        session_id, turn_id, pending_id, questions, context, signature, waiter_id, waiter_instance
    )
    values = [_row_values(r) for r in records]
    if state is not None and len(values) == 1 and conn.dialect.name == "postgresql":
        await _INSERT_AND_SET_STATE.rows(conn, {**values[0], "b_session": session_id, "b_state": state})
        bumped.note(conn, session_id)
        return records
    await _INSERT_ROW.many(conn, values)
    if state is not None:
        await tasks.set_session_state(conn, session_id, state, bump=True)
    return records


async def insert_decided(
    conn: AsyncConnection,
    *,
    session_id: str,
    turn_id: str,
    spec: Spec,
    context: str | None,
    signature: str,
    response: dict[str, Any],
    status: ClarificationStatus = ClarificationStatus.ANSWERED,
    extra: Mapping[str, Any] | None = None,
) -> MessageRecord:
    """A pending action decided as it is asked (a permission a rule allows or denies): its row, of
    a new bundle, settled at once (`status`: answered, or rejected for a denial) with `extra`
    metadata beside the response. History only: it never blocks the session or takes a claim."""
    (record,) = _bundle_records(session_id, turn_id, new_id(), [spec], context, signature, "", "")
    metadata = {
        **record.metadata,
        "status": status.value,
        "agent_disconnected": True,
        "requests_input": False,
        "response": response,
        **(extra or {}),
    }
    for unused in ("waiter_id", "waiter_instance"):
        metadata.pop(unused)
    decided = replace(record, metadata=metadata)
    await _INSERT_ROW.many(conn, [_row_values(decided)])
    return decided


# PostgreSQL, a one-question ask in the common case as one statement: what `_ASK_CONTEXT` reads, and,
# only when the session is live, has a current turn and no active bundle with the same questions (and,
# for a permission request, no rule that may decide it: `_with_rules`), the bundle's row inserted into
# that turn and the session set waiting (with its sequence bump) unless it already was. All of it in
# the snapshot after the session's lock; any other case is left to the caller, which decides from the
# context as before.
def _ask_and_insert(*, outbox: bool, rules: bool) -> Prepared:
    context = _ask_context_cte(rules=rules)
    conditions = [
        context.c.current_turn.is_not(None),
        context.c.reusable.is_(None),
        session_is_live(context.c.state),
    ]
    if rules:
        conditions.append(permission_rules.no_candidates(context))
    inserted = (
        M.insert()
        .from_select(
            list(_ROW_COLUMNS),
            select(
                bindparam("b_id", type_=M.c.id.type),
                context.c.id,
                context.c.current_turn,
                *(bindparam(f"b_{c}", type_=M.c[c].type) for c in _ROW_COLUMNS[3:]),
            ).where(*conditions),
        )
        .returning(M.c.id)
        .cte("inserted")
    )
    set_waiting = (
        update(S)
        .where(
            S.c.id == B_SESSION,
            exists(select(inserted.c.id)),
            S.c.state != SessionState.WAITING_FOR_INPUT.value,
        )
        .values(
            state=SessionState.WAITING_FOR_INPUT.value,
            pending_seq=S.c.pending_seq + 1,
            updated_at=bindparam("b_updated_at", type_=S.c.updated_at.type),
        )
        .returning(S.c.id)
        .cte("set_waiting")
    )
    columns = [
        *context.c,
        select(inserted.c.id).scalar_subquery().label("inserted"),
        select(func.count()).select_from(set_waiting).scalar_subquery().label("set_waiting"),
    ]
    if outbox:
        # ... and, for an ask that tells people, the notification outbox's rows of the new bundle
        # (`reach.ask_outbox_insert`), only when its row was inserted, for the context's task and
        # session.
        written = reach.ask_outbox_insert(
            task_id=context.c.task_id,
            session_id=context.c.id,
            where=[exists(select(inserted.c.id))],
            alongside=context,
        ).cte("outbox")
        columns.append(select(func.count()).select_from(written).scalar_subquery().label("outbox"))
    return Prepared(permission_rules.with_candidates(context, columns) if rules else select(*columns))


_ASK_AND_INSERT = {
    (outbox, rules): _ask_and_insert(outbox=outbox, rules=rules)
    for outbox in (False, True)
    for rules in (False, True)
}


@dataclass(frozen=True, slots=True)
class AskContext:
    """The session as the ask found it, its current turn, the active bundle an identical ask would
    re-attach to, the rules that may decide it (asked for: `permission_rules.candidates_of`), and
    (`ask_context_inserting`) the bundle's rows when the statement already inserted them, with the
    number of notification outbox rows it wrote for them (None: it wrote none, the caller writes them
    with `reach.enqueue_ask`)."""

    session: SessionRecord
    turn_id: str | None
    reusable: str | None
    inserted: list[MessageRecord] | None = None
    outbox_rows: int | None = None
    rules: list[RuleRecord] = field(default_factory=list)
    project: str | None = None  # the session's task's, read with the rules


async def ask_context_inserting(
    conn: AsyncConnection,
    *,
    session_id: str,
    pending_id: str,
    questions: Sequence[Spec],
    context: str | None,
    signature: str,
    waiter_id: str,
    waiter_instance: str,
    outbox: reach.AskOutbox | None = None,
    rules: Mapping[str, Any] | None = None,
) -> AskContext:
    """`ask_context_with_rules`; and on PostgreSQL, for a one-question ask in the common case (a live
    session with a current turn, no identical active bundle and no rule that may decide it),
    `insert_bundle` with the session set waiting, and with `outbox` the bundle's notification outbox
    rows (`reach.enqueue_ask`), in the same statement. `inserted` is None when it inserted nothing:
    the caller decides from the context."""
    if len(questions) != 1 or conn.dialect.name != "postgresql":
        return await ask_context_with_rules(conn, session_id, signature, rules)
    (record,) = _bundle_records(
        session_id, "", pending_id, questions, context, signature, waiter_id, waiter_instance
    )
    params = {**_row_values(record), "b_session": session_id, "b_signature": signature, **(rules or {})}
    statement = _ASK_AND_INSERT[(outbox is not None, rules is not None)]
    found = await statement.rows(conn, params if outbox is None else {**params, **outbox.params(pending_id)})
    if not found:
        raise NotFound("session", session_id)
    row = found[0]
    context_found = _ask_context(found)
    if row.inserted is None:
        return context_found
    if row.set_waiting:
        bumped.note(conn, session_id)
    written = None if outbox is None else int(row.outbox)
    inserted = [replace(record, turn_id=str(context_found.turn_id))]
    return replace(context_found, inserted=inserted, outbox_rows=written)


async def ensure_bundle(
    conn: AsyncConnection,
    found: AskContext,
    *,
    turn_id: str,
    pending_id: str,
    questions: Sequence[Spec],
    context: str | None,
    signature: str,
    waiter_id: str,
    waiter_instance: str,
) -> list[MessageRecord]:
    """The asked bundle's rows, written once: those the context's own statement inserted
    (`ask_context_inserting`), or else `insert_bundle` now, with the session set waiting unless it
    already was."""
    if found.inserted is not None:
        return found.inserted
    waiting = found.session.state == SessionState.WAITING_FOR_INPUT
    return await insert_bundle(
        conn,
        session_id=found.session.id,
        turn_id=turn_id,
        pending_id=pending_id,
        questions=questions,
        context=context,
        signature=signature,
        waiter_id=waiter_id,
        waiter_instance=waiter_instance,
        state=None if waiting else SessionState.WAITING_FOR_INPUT.value,
    )


async def attach_waiter(
    conn: AsyncConnection, *, session_id: str, pending_id: str, waiter_id: str, waiter_instance: str
) -> list[str]:
    """A new waiter takes over an active bundle: its pending current-turn rows become attached."""
    result = await conn.execute(
        update(M)
        .where(PENDING_ID_IS, ACTIVE_ROWS)
        .values(
            metadata=json_update(
                M.c.metadata,
                {"agent_disconnected": False, "waiter_id": waiter_id, "waiter_instance": waiter_instance},
            )
        )
        .returning(M.c.id),
        bound(session_id, pending_id),
    )
    return [r.id for r in result]


# --- detach / cancel / expire -------------------------------------------------------------------


async def detach(
    conn: AsyncConnection,
    session_id: str,
    *,
    pending_id: str | None = None,
    waiter_id: str | None = None,
    turn_id: str | None = None,
) -> list[tuple[str, str]]:
    """Mark pending, not-yet-detached current-turn rows `agent_disconnected`; (message id, pending id)
    of exactly the rows changed, so a repeat changes and publishes nothing.

    With `waiter_id`, only rows still owned by that waiter: a waiter that lost its bundle to a newer
    waiter of the same questions must not detach it.
    """
    conditions = [ACTIVE_ROWS, not_(json_flag(M.c.metadata, "agent_disconnected"))]
    conditions.append(OPEN_IN_CURRENT_TURN if pending_id is None else PENDING_ID_IS)
    if waiter_id is not None:
        conditions.append(json_text(M.c.metadata, "waiter_id") == waiter_id)
    if turn_id is not None:
        conditions.append(M.c.turn_id == turn_id)
    result = await conn.execute(
        update(M)
        .where(*conditions)
        .values(metadata=json_update(M.c.metadata, {"agent_disconnected": True}))
        .returning(M.c.id, M.c.pending_id),
        bound(session_id, pending_id),
    )
    return [(r.id, str(r.pending_id)) for r in result]


async def close_pending(
    conn: AsyncConnection, session_id: str, pending_id: str, status: ClarificationStatus
) -> list[str]:
    """Cancel (or expire) the pending current-turn rows of one bundle; other bundles are untouched."""
    result = await conn.execute(
        update(M)
        .where(PENDING_ID_IS, ACTIVE_ROWS)
        .values(status=status.value, updated_at=utcnow())
        .returning(M.c.id),
        bound(session_id, pending_id),
    )
    return [r.id for r in result]


async def expire_current_turn_bundles(conn: AsyncConnection, session_id: str) -> list[str]:
    """Expire every pending clarification row of the session's current turn; returns the changed ids.

    Called while the session enters a terminal state, before that transition is published, so no
    answerable question survives a finished session. Older turns are history and stay untouched.
    """
    result = await conn.execute(
        update(M)
        .where(
            M.c.session_id == B_SESSION,
            is_pending_action(M),
            # (an open row of the current turn is a row of the current turn: derived once)
            OPEN_IN_CURRENT_TURN,
            is_pending_status(M),
        )
        .values(
            status=ClarificationStatus.EXPIRED.value,
            updated_at=utcnow(),
        )
        .returning(M.c.id),
        bound(session_id),
    )
    return [row.id for row in result]


# --- workflow guard -----------------------------------------------------------------------------


async def sessions_with_active_bundles(conn: AsyncConnection, task_id: str) -> list[str]:
    """Sessions of the task that hold an active clarification (current turn, pending, live session)."""
    result = await conn.execute(
        select(M.c.session_id)
        .join(S, S.c.id == M.c.session_id)
        .where(S.c.task_id == task_id, active_pending_rows(M, S.c.state))
        .group_by(M.c.session_id)
        .order_by(M.c.session_id)
    )
    return [r.session_id for r in result]
