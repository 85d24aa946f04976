"""Remembered permission rules: a session's "always allow this tool" decisions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.prepared import Prepared
from backend.db.tables import permission_rules as R
from backend.domain.ids import new_id
from backend.domain.permissions import ANY_INPUT, canonical_json, input_key, rule_keys


@dataclass(frozen=True, slots=True)
class RuleRecord:
    id: str
    session_id: str
    tool_name: str
    input: Any  # None with `any_input`
    any_input: bool
    created_by: str | None
    source_pending_id: str | None
    created_at: datetime


def _input(row: Any) -> Any:
    """The rule's input as remembered: its JSON text where it has one (JSONB rewrites numbers)."""
    if row.input_key == ANY_INPUT:
        return None
    return row.input if row.input_json is None else json.loads(row.input_json)


def _record(row: Any) -> RuleRecord:
    return RuleRecord(
        row.id,
        row.session_id,
        row.tool_name,
        _input(row),
        row.input_key == ANY_INPUT,
        row.created_by,
        row.source_pending_id,
        row.created_at,
    )


# Built once per process: every ask of a permission runs it, in the ask's own transaction.
_MATCHING = Prepared(
    select(R)
    .where(
        R.c.session_id == bindparam("b_session", type_=R.c.session_id.type),
        R.c.tool_name == bindparam("b_tool", type_=R.c.tool_name.type),
        R.c.input_key.in_(
            [bindparam("b_exact", type_=R.c.input_key.type), bindparam("b_any", type_=R.c.input_key.type)]
        ),
    )
    .order_by(R.c.input_key.desc())  # the exact key (a hash) sorts before "" (any input)
    .limit(1)
)


async def matching(
    conn: AsyncConnection, session_id: str, tool_name: str, tool_input: Any
) -> RuleRecord | None:
    """The session's rule that allows this call, if any (one for this exact input first)."""
    exact, any_input = rule_keys(tool_input)
    row = await _MATCHING.first(
        conn, {"b_session": session_id, "b_tool": tool_name, "b_exact": exact, "b_any": any_input}
    )
    return None if row is None else _record(row)


async def remember(
    conn: AsyncConnection,
    *,
    session_id: str,
    tool_name: str,
    tool_input: Any,
    any_input: bool,
    created_by: str | None,
    source_pending_id: str,
) -> RuleRecord:
    """The rule (the one already there when the same rule exists: remembering twice is one rule)."""
    key = ANY_INPUT if any_input else input_key(tool_input)
    existing = await conn.execute(
        select(R).where(R.c.session_id == session_id, R.c.tool_name == tool_name, R.c.input_key == key)
    )
    row = existing.first()
    if row is not None:
        return _record(row)
    rule = RuleRecord(
        new_id(),
        session_id,
        tool_name,
        None if any_input else tool_input,
        any_input,
        created_by,
        source_pending_id,
        utcnow(),
    )
    await conn.execute(
        R.insert().values(
            id=rule.id,
            session_id=session_id,
            tool_name=tool_name,
            input_key=key,
            input=rule.input,
            input_json=None if any_input else canonical_json(tool_input),
            created_by=created_by,
            source_pending_id=source_pending_id,
            created_at=rule.created_at,
        )
    )
    return rule


async def for_sessions(conn: AsyncConnection, session_ids: Sequence[str]) -> list[RuleRecord]:
    if not session_ids:
        return []
    result = await conn.execute(
        select(R).where(R.c.session_id.in_(list(session_ids))).order_by(R.c.created_at, R.c.id)
    )
    return [_record(r) for r in result]


async def get(conn: AsyncConnection, rule_id: str) -> RuleRecord | None:
    row = (await conn.execute(select(R).where(R.c.id == rule_id))).first()
    return None if row is None else _record(row)


async def revoke(conn: AsyncConnection, rule_id: str) -> bool:
    result = await conn.execute(delete(R).where(R.c.id == rule_id))
    return bool(result.rowcount)
