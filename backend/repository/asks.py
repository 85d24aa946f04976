"""An ask's statements, the same for both kinds of pending action: what it reads under the session's
lock (the session, its current turn, the active bundle an identical ask re-attaches to, and for a
permission request the rules that may decide it) and the bundle it writes.

On PostgreSQL a one-question ask in the common case reads its context and writes its row, the
session's state and its notification outbox rows in one statement (`ask_context_inserting`);
`ensure_bundle` writes the bundle otherwise, so the caller writes it once either way. Callers run
inside a unit of work (`services/uow.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import CTE, Select, bindparam, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.fast_path import Prepared
from backend.db.sqlfuncs import json_text
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.errors import NotFound
from backend.domain.ids import new_id
from backend.domain.lifecycle import Spec
from backend.domain.records import MessageRecord, SessionRecord
from backend.domain.rule_scopes import RuleRecord
from backend.domain.states import ClarificationStatus, SessionState
from backend.repository import bumped, message_fields, permission_rules, reach, rows, tasks
from backend.repository.authority import (
    active_pending_rows,
    current_turn_id,
    session_is_live,
)
from backend.repository.pending_rows import (
    B_SESSION,
    PID,
)

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


@dataclass(frozen=True, slots=True)
class NewBundle:
    """What an ask writes, wherever it is written: the bundle's id, its questions (a permission
    request: one), their context and signature, and the waiter that waits on it ("" for none)."""

    pending_id: str
    questions: Sequence[Spec]
    context: str | None
    signature: str
    waiter_id: str = ""
    waiter_instance: str = ""


def _bundle_records(session_id: str, turn_id: str, bundle: NewBundle) -> list[MessageRecord]:
    specs = bundle.questions
    now = utcnow()
    records: list[MessageRecord] = []
    for i, spec in enumerate(specs):
        metadata: dict[str, Any] = {
            "pending_id": bundle.pending_id,
            **spec.row_metadata(),
            "question_index": i,
            "question_total": len(specs),
            "context": bundle.context,
            "status": ClarificationStatus.PENDING.value,
            "agent_disconnected": False,
            # Only the last row of a bundle requests input (kandev-notes "Shapes").
            "requests_input": i == len(specs) - 1,
            "bundle_signature": bundle.signature,
            "waiter_id": bundle.waiter_id,
            "waiter_instance": bundle.waiter_instance,
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
    conn: AsyncConnection, bundle: NewBundle, *, session_id: str, turn_id: str, state: str | None = None
) -> list[MessageRecord]:
    """One row per question (a permission request: one row) in one multi-row INSERT: the bundle is
    written whole or not at all.

    `state`: also set the session's state and bump its sequence (`tasks.set_session_state(...,
    bump=True)`, noted for the unit of work), in the same statement on PostgreSQL for a one-question
    bundle."""
    records = _bundle_records(session_id, turn_id, bundle)
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
    (record,) = _bundle_records(session_id, turn_id, NewBundle(new_id(), [spec], context, signature))
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
    bundle: NewBundle,
    *,
    session_id: str,
    outbox: reach.AskOutbox | None = None,
    rules: Mapping[str, Any] | None = None,
) -> AskContext:
    """`ask_context_with_rules`; and on PostgreSQL, for a one-question ask in the common case (a live
    session with a current turn, no identical active bundle and no rule that may decide it),
    `insert_bundle` with the session set waiting, and with `outbox` the bundle's notification outbox
    rows (`reach.enqueue_ask`), in the same statement. `inserted` is None when it inserted nothing:
    the caller decides from the context."""
    signature = bundle.signature
    if len(bundle.questions) != 1 or conn.dialect.name != "postgresql":
        return await ask_context_with_rules(conn, session_id, signature, rules)
    (record,) = _bundle_records(session_id, "", bundle)
    params = {**_row_values(record), "b_session": session_id, "b_signature": signature, **(rules or {})}
    statement = _ASK_AND_INSERT[(outbox is not None, rules is not None)]
    if outbox is not None:
        params.update(outbox.params(bundle.pending_id))
    found = await statement.rows(conn, params)
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
    conn: AsyncConnection, found: AskContext, bundle: NewBundle, *, turn_id: str
) -> list[MessageRecord]:
    """The asked bundle's rows, written once: those the context's own statement inserted
    (`ask_context_inserting`), or else `insert_bundle` now, with the session set waiting unless it
    already was."""
    if found.inserted is not None:
        return found.inserted
    waiting = found.session.state == SessionState.WAITING_FOR_INPUT
    return await insert_bundle(
        conn,
        bundle,
        session_id=found.session.id,
        turn_id=turn_id,
        state=None if waiting else SessionState.WAITING_FOR_INPUT.value,
    )
