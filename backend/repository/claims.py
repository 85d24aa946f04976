"""A response's durable claim of a pending action, and how the claim ends: settled (delivered or
retired) or restored to pending. The same for every kind of pending action.

Each write is one conditional statement whose WHERE re-checks what the caller decided on (pending
status, current-turn ownership, live session, claim identity), so a stale decision changes nothing;
settle and restore of one claim serialize under the session's lock, and whichever runs first wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, bindparam, case, exists, false, func, not_, null, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.fast_path import Prepared
from backend.db.sqlfuncs import json_patch, json_text, json_update
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.lifecycle import Answer, BundleRow
from backend.domain.permissions import Decision
from backend.domain.states import ClarificationStatus, SessionState
from backend.repository import bumped, tasks
from backend.repository.pending_rows import (
    ACTIVE_ROWS,
    B_SESSION,
    BUNDLE_ROW_COLUMNS,
    IN_CURRENT_TURN,
    PENDING_ID_IS,
    SESSION_LIVE,
    bound,
    bundle_row,
)

# --- claim ------------------------------------------------------------------------------------


async def claim(
    conn: AsyncConnection,
    *,
    session_id: str,
    pending_id: str,
    message_ids: Sequence[str],
    answers: Mapping[str, Answer | Decision],
    rejected: bool,
    claim_id: str | None,
    detach_rows: bool,
    bump: bool = False,
    decided_by: str | None = None,
) -> list[BundleRow]:
    """The atomic current-turn claim: ONE conditional UPDATE of the bundle's pending rows.

    Writes each row's answer (status answered/rejected + response) and, with `claim_id`, the durable
    delivery intent. The WHERE re-checks pending status, current-turn ownership and a live session;
    the rows it returns are the claim (an empty list means the claim was lost).

    `bump`: the session's sequence is to be bumped when the claim took rows: on PostgreSQL, a
    one-row claim does it in the same statement and notes it (`bumped`); otherwise the unit of work
    does it at commit. `decided_by`: the user whose response this is, written into the rows (None:
    left as it is).
    """
    if not message_ids:
        return []
    if len(message_ids) == 1 and len(answers) <= 1:
        together = bump and conn.dialect.name == "postgresql"
        claimed = await _claim_one(
            conn,
            session_id=session_id,
            pending_id=pending_id,
            message_id=message_ids[0],
            answer=next(iter(answers.items())) if answers else None,
            rejected=rejected,
            claim_id=claim_id,
            detach_rows=detach_rows,
            bump=together,
            decided_by=decided_by,
        )
        if together and claimed:
            bumped.note(conn, session_id)
        return claimed
    columns, patch = _claim_values(
        rejected=rejected, claim_id=claim_id, detach_rows=detach_rows, decided_by=decided_by
    )
    values: dict[str, Any] = {**columns, "updated_at": utcnow()}
    metadata = _answered_metadata(patch, answers)
    if metadata is not M.c.metadata:
        values["metadata"] = metadata
    result = await conn.execute(
        update(M)
        .where(*_claimable(M.c.id.in_(list(message_ids))))
        .values(values)
        .returning(*BUNDLE_ROW_COLUMNS),
        bound(session_id, pending_id),
    )
    return [bundle_row(r) for r in result]


def _answered_metadata(patch: dict[str, Any], answers: Mapping[str, Answer | Decision]) -> Any:
    """Several rows' new metadata: the claim's patch, and each answered question's response."""
    qid = json_text(M.c.metadata, "question_id")
    new_metadata: Any = json_update(M.c.metadata, patch) if patch else M.c.metadata
    if answers:
        new_metadata = case(
            *(
                (qid == question_id, json_update(M.c.metadata, {**patch, "response": a.as_response()}))
                for question_id, a in answers.items()
            ),
            else_=new_metadata,
        )
    return new_metadata


def _claimable(rows_: ColumnElement[bool]) -> tuple[ColumnElement[bool], ...]:
    """Which of these rows a claim of bundle `b_pending_id` may take: active, and not already claimed."""
    return (rows_, PENDING_ID_IS, ACTIVE_ROWS, not_(M.c.delivery_pending))


def _claim_values(
    *, rejected: bool, claim_id: str | None, detach_rows: bool, decided_by: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a claim writes into every claimed row (the answer itself aside): (its columns, the
    metadata keys it sets)."""
    status = ClarificationStatus.REJECTED if rejected else ClarificationStatus.ANSWERED
    columns: dict[str, Any] = {"status": status.value}
    if claim_id is not None:
        columns["claim_id"] = claim_id
        columns["delivery_pending"] = true()
    if decided_by is not None:
        columns["decided_by"] = decided_by
    return columns, ({"agent_disconnected": True} if detach_rows else {})


# The claim of a one-row bundle (the common case), built once per shape of the written metadata.
_CLAIM_ONE: dict[tuple[str, ...], Prepared] = {}
_CLAIM_WHERE = _claimable(M.c.id == bindparam("b_id", type_=M.c.id.type))


def _with_bump(write: Any, *, also: Any = None) -> Any:
    """PostgreSQL: `write` (a DML statement with RETURNING) as a CTE whose rows the statement returns,
    and, only when it returned any, the unit of work's sequence bump of the session `b_session` in the
    same statement (`also`: further columns of the bump's outcome). Both see one snapshot; neither
    reads what the other writes."""
    done = write.cte("done")
    bumped = (
        update(S)
        .where(S.c.id == B_SESSION, exists(select(done.c[0])))
        .values(pending_seq=S.c.pending_seq + 1)
        .returning(S.c.id)
    )
    if also is not None:
        bumped = also(bumped)
    bump = bumped.cte("bumped")
    return select(*done.c, select(func.count()).select_from(bump).scalar_subquery().label("bumped"))


def _claim_one_statement(
    patch_keys: tuple[str, ...], claims: bool, with_response: bool, *, bump: bool = False, by: bool = False
) -> Prepared:
    shape = (
        *patch_keys,
        "+claim" if claims else "",
        "+response" if with_response else "",
        "+bump" if bump else "",
        "+by" if by else "",
    )
    prepared = _CLAIM_ONE.get(shape)
    if prepared is None:
        values: dict[str, Any] = {
            "status": bindparam("b_status", type_=M.c.status.type),
            "updated_at": bindparam("b_now", type_=M.c.updated_at.type),
        }
        if claims:
            values["claim_id"] = bindparam("b_claim_id", type_=M.c.claim_id.type)
            values["delivery_pending"] = true()
        if by:
            values["decided_by"] = bindparam("b_decided_by", type_=M.c.decided_by.type)
        new_metadata: Any = (
            json_update(M.c.metadata, dict.fromkeys(patch_keys), param="b_patch")
            if patch_keys
            else M.c.metadata
        )
        if with_response:
            answered = json_update(
                M.c.metadata, dict.fromkeys((*patch_keys, "response")), param="b_patch_answer"
            )
            new_metadata = case(
                (json_text(M.c.metadata, "question_id") == bindparam("b_question_id"), answered),
                else_=new_metadata,
            )
        if new_metadata is not M.c.metadata:
            values["metadata"] = new_metadata
        write = update(M).where(*_CLAIM_WHERE).values(values).returning(*BUNDLE_ROW_COLUMNS)
        prepared = _CLAIM_ONE[shape] = Prepared(_with_bump(write) if bump else write)
    return prepared


async def _claim_one(
    conn: AsyncConnection,
    *,
    session_id: str,
    pending_id: str,
    message_id: str,
    answer: tuple[str, Answer | Decision] | None,
    rejected: bool,
    claim_id: str | None,
    detach_rows: bool,
    bump: bool = False,
    decided_by: str | None = None,
) -> list[BundleRow]:
    """`claim` for one row: the same conditional UPDATE, with its values bound instead of built
    (`bump`: PostgreSQL only, with the session's sequence bump when it claimed anything)."""
    columns, patch = _claim_values(rejected=rejected, claim_id=claim_id, detach_rows=detach_rows)
    params: dict[str, Any] = {
        **bound(session_id, pending_id),
        "b_id": message_id,
        "b_status": columns["status"],
        "b_now": utcnow(),
    }
    if claim_id is not None:
        params["b_claim_id"] = claim_id
    if decided_by is not None:
        params["b_decided_by"] = decided_by
    if patch:
        params["b_patch"] = json_patch(patch)
    if answer is not None:
        question_id, value = answer
        params["b_question_id"] = question_id
        params["b_patch_answer"] = json_patch({**patch, "response": value.as_response()})
    statement = _claim_one_statement(
        tuple(patch), claim_id is not None, answer is not None, bump=bump, by=decided_by is not None
    )
    claimed = await statement.rows(conn, params)
    return [bundle_row(r) for r in claimed]


def _claimed_by(message_ids: Sequence[str], claim_id: str) -> list[ColumnElement[bool]]:
    return [M.c.id.in_(list(message_ids)), M.c.delivery_pending, M.c.claim_id == claim_id]


def _settle(rows_: ColumnElement[bool]) -> Any:
    """Remove the delivery intent of these rows while claim `b_claim` still holds it. It writes one
    unindexed column: on PostgreSQL a heap-only update."""
    return (
        update(M)
        .where(rows_, M.c.delivery_pending, M.c.claim_id == bindparam("b_claim", type_=M.c.claim_id.type))
        .values(delivery_pending=false())
        .returning(*BUNDLE_ROW_COLUMNS)
    )


_SETTLE_CLAIM = _settle(M.c.id.in_(bindparam("b_ids", expanding=True)))


_SETTLE_ONE = Prepared(_settle(M.c.id == bindparam("b_id", type_=M.c.id.type)))


def _resume_when_unblocked(bump: Any) -> Any:
    """The bump of `_with_bump` that is also `tasks.mark_running_when_unblocked`."""
    return bump.where(*tasks.WAITING_AND_UNBLOCKED).values(
        state=SessionState.RUNNING.value, updated_at=bindparam("b_now", type_=S.c.updated_at.type)
    )


_SETTLE_AND_RESUME = Prepared(_with_bump(_SETTLE_ONE.statement, also=_resume_when_unblocked))


async def settle_claim_and_resume(
    conn: AsyncConnection, session_id: str, message_ids: Sequence[str], claim_id: str
) -> tuple[list[BundleRow], bool]:
    """`settle_claim`, then, when it settled anything, `tasks.mark_running_when_unblocked(...,
    bump=True)`, noted for the unit of work: one statement on PostgreSQL (settling removes only the
    delivery intent, which no blocking condition reads, so both parts may share one snapshot). True
    when the session resumed."""
    if len(message_ids) == 1 and conn.dialect.name == "postgresql":
        params = {"b_id": message_ids[0], "b_claim": claim_id, "b_session": session_id, "b_now": utcnow()}
        found = await _SETTLE_AND_RESUME.rows(conn, params)
        resumed = bool(found) and found[0].bumped == 1
        if resumed:
            bumped.note(conn, session_id)
        return [bundle_row(r) for r in found], resumed
    settled = await settle_claim(conn, message_ids, claim_id)
    if not settled:
        return [], False
    return settled, await tasks.mark_running_when_unblocked(conn, session_id, bump=True)


async def settle_claim(conn: AsyncConnection, message_ids: Sequence[str], claim_id: str) -> list[BundleRow]:
    """Finalize (delivery confirmed) or retire (delivery impossible) exactly this claim's rows: remove
    the intent while it is still set by this claim. `updated_at` keeps the response time."""
    if len(message_ids) == 1:
        settled = await _SETTLE_ONE.rows(conn, {"b_id": message_ids[0], "b_claim": claim_id})
        return [bundle_row(r) for r in settled]
    result = await conn.execute(_SETTLE_CLAIM, {"b_ids": list(message_ids), "b_claim": claim_id})
    return [bundle_row(r) for r in result]


# What a restore writes besides the pending status: no claim, no intent, and no response.
RESTORE_COLUMNS: dict[str, Any] = {
    "status": ClarificationStatus.PENDING.value,
    "claim_id": null(),
    "delivery_pending": false(),
}
RESTORE_REMOVES = ("response",)


async def restore_claim(
    conn: AsyncConnection, session_id: str, message_ids: Sequence[str], claim_id: str, *, detach_rows: bool
) -> list[str]:
    """Put exactly this claim's rows back to pending, only while their turn is current and the session
    live. Serializes with `settle_claim` under the session lock: whichever runs first wins."""
    patch: dict[str, Any] = {"agent_disconnected": True} if detach_rows else {}
    result = await conn.execute(
        update(M)
        .where(
            *_claimed_by(message_ids, claim_id),
            M.c.session_id == B_SESSION,
            IN_CURRENT_TURN,
            SESSION_LIVE,
        )
        .values(
            **RESTORE_COLUMNS,
            metadata=json_update(M.c.metadata, patch, remove=RESTORE_REMOVES),
            updated_at=utcnow(),
        )
        .returning(M.c.id),
        bound(session_id),
    )
    return [r.id for r in result]
