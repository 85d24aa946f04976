"""Permission rules: patterns that allow, ask or deny a tool call, in a session, task, project or
everywhere (`domain.rule_scopes`, `db.tables.permission_rules`).

The rules that may decide a request are read by the ask's own context statement
(`repository.asks.ask_context_inserting` joins `candidates_on` with `CANDIDATE_COLUMNS`),
so asking costs no statement more for them: the rules that reach the session, whose tool is the
request's (or its MCP server's, or every tool's), that have not expired, and that are not an
exact-input rule for another input. The pattern itself is matched in Python (`rule_patterns`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import CTE, ColumnElement, Select, and_, bindparam, delete, exists, func, not_, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.sqlfuncs import json_text
from backend.db.tables import permission_rules as R
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.db.tables import tasks as T
from backend.domain.ids import new_id
from backend.domain.permissions import canonical_json, input_key
from backend.domain.rule_scopes import (
    LOOKUP_KEYS,
    RuleBehavior,
    RuleRecord,
    Scope,
    in_evaluation_order,
    lookup_keys,
)
from backend.domain.states import MESSAGE_KIND_PERMISSION

# The metadata key of a request's row that a rule decided as it was asked: the rule's id (what the
# rules panel counts).
DECIDED_BY_RULE = "decided_by_rule"

_FIELDS = (
    "id",
    "pattern",
    "behavior",
    "scope",
    "scope_id",
    "tool_name",
    "input_key",
    "input",
    "input_json",
    "expires_at",
    "created_by",
    "source_pending_id",
    "created_at",
)
# A rule's columns as the ask's context statement selects them beside the session's own.
CANDIDATE_COLUMNS = tuple(R.c[name].label(f"rule_{name}") for name in _FIELDS)


@dataclass(frozen=True, slots=True)
class NewRule:
    pattern: str
    behavior: RuleBehavior
    scope: Scope
    scope_id: str | None
    tool_name: str
    created_by: str | None
    expires_at: dt.datetime | None = None
    # A rule for this one input only (exact=True); None and False for every other rule.
    input: Any = None
    exact: bool = False
    source_pending_id: str | None = None

    def same_as(self, rule: RuleRecord) -> bool:
        """Would this rule say what `rule` says already (remembering twice is one rule)?"""
        return (
            (rule.pattern, rule.behavior, rule.scope, rule.scope_id, rule.exact)
            == (self.pattern, self.behavior, self.scope, self.scope_id, self.exact)
            and (not self.exact or input_key(rule.input) == input_key(self.input))
            and rule.expires_at == self.expires_at
        )


def _input(m: Any, prefix: str) -> Any:
    """An exact-input rule's input as remembered: its JSON text where it has one (JSONB rewrites
    numbers)."""
    if m[f"{prefix}input_key"] is None:
        return None
    text = m[f"{prefix}input_json"]
    return m[f"{prefix}input"] if text is None else json.loads(text)


def record(m: Any, prefix: str = "") -> RuleRecord:
    """A rule from a row mapping (`prefix`: "rule_" for `CANDIDATE_COLUMNS`)."""
    return RuleRecord(
        id=m[f"{prefix}id"],
        pattern=m[f"{prefix}pattern"],
        behavior=RuleBehavior(m[f"{prefix}behavior"]),
        scope=Scope(m[f"{prefix}scope"]),
        scope_id=m[f"{prefix}scope_id"],
        tool_name=m[f"{prefix}tool_name"],
        input=_input(m, prefix),
        exact=m[f"{prefix}input_key"] is not None,
        expires_at=m[f"{prefix}expires_at"],
        created_by=m[f"{prefix}created_by"],
        source_pending_id=m[f"{prefix}source_pending_id"],
        created_at=m[f"{prefix}created_at"],
    )


def _row(rule: RuleRecord) -> dict[str, Any]:
    return {
        "id": rule.id,
        "session_id": rule.session_id,
        "pattern": rule.pattern,
        "behavior": rule.behavior.value,
        "scope": rule.scope.value,
        "scope_id": rule.scope_id,
        "tool_name": rule.tool_name,
        "input_key": input_key(rule.input) if rule.exact else None,
        "input": rule.input if rule.exact else None,
        "input_json": canonical_json(rule.input) if rule.exact else None,
        "expires_at": rule.expires_at,
        "created_by": rule.created_by,
        "source_pending_id": rule.source_pending_id,
        "created_at": rule.created_at,
    }


# --- which rules reach a session ----------------------------------------------------------------


def applicable(
    session_id: ColumnElement[Any], task_id: ColumnElement[Any], project: ColumnElement[Any]
) -> ColumnElement[bool]:
    """The rules that reach this session (of this task, of this project)."""
    return or_(
        and_(R.c.scope == Scope.SESSION.value, R.c.scope_id == session_id),
        and_(R.c.scope == Scope.TASK.value, R.c.scope_id == task_id),
        and_(R.c.scope == Scope.PROJECT.value, R.c.scope_id == project),
        and_(R.c.scope == Scope.GLOBAL.value, R.c.scope_id.is_(None)),
    )


def _live(now: ColumnElement[Any]) -> ColumnElement[bool]:
    return or_(R.c.expires_at.is_(None), R.c.expires_at > now)


_NOW = bindparam("b_rule_now", type_=R.c.expires_at.type)


def candidates_on(
    session_id: ColumnElement[Any], task_id: ColumnElement[Any], project: ColumnElement[Any]
) -> ColumnElement[bool]:
    """The join condition of the ask's candidate rules (bound by `candidate_params`)."""
    return and_(
        applicable(session_id, task_id, project),
        _live(_NOW),
        or_(
            *(
                R.c.tool_name == bindparam(f"b_rule_tool{i}", type_=R.c.tool_name.type)
                for i in range(LOOKUP_KEYS)
            )
        ),
        or_(R.c.input_key.is_(None), R.c.input_key == bindparam("b_rule_exact", type_=R.c.input_key.type)),
    )


def project_of(task_id: ColumnElement[Any]) -> Any:
    """The ask context's column of its task's project (what `candidates_on` and the matcher read)."""
    return select(T.c.project).where(T.c.id == task_id).scalar_subquery().label("project")


def with_candidates(context: CTE, columns: Sequence[Any]) -> Select[Any]:
    """`columns` of the ask's `context` (a CTE with the session's id, task_id and project) once per
    candidate rule, with the rule's own columns (`CANDIDATE_COLUMNS`) beside them; once, with none,
    when no rule may decide it."""
    on = candidates_on(context.c.id, context.c.task_id, context.c.project)
    return select(*columns, *CANDIDATE_COLUMNS).select_from(context.outerjoin(R, on))


def no_candidates(context: CTE) -> ColumnElement[bool]:
    """No rule may decide the ask of `context` (then the context's statement may write the ask)."""
    return not_(
        exists(select(R.c.id).where(candidates_on(context.c.id, context.c.task_id, context.c.project)))
    )


def candidate_params(tool_name: str, tool_input: Any) -> dict[str, Any]:
    keys = lookup_keys(tool_name)
    return {
        **{f"b_rule_tool{i}": key for i, key in enumerate(keys)},
        "b_rule_exact": input_key(tool_input),
        "b_rule_now": utcnow(),
    }


def candidates_of(found: Sequence[Any]) -> tuple[list[RuleRecord], str | None]:
    """The candidate rules among the context statement's rows (one row per rule, or one without),
    in evaluation order, and the task's project; none when it did not read them."""
    if not found or "rule_id" not in found[0]._fields:
        return [], None
    rules = [record(r._mapping, "rule_") for r in found if r.rule_id is not None]
    return in_evaluation_order(rules), found[0].project


def _session_here(session_id: str) -> Any:
    """The session's id, task and project, as a subquery the rules are joined to."""
    return (
        select(S.c.id, S.c.task_id, T.c.project)
        .join(T, T.c.id == S.c.task_id)
        .where(S.c.id == session_id)
        .subquery()
    )


async def candidates(
    conn: AsyncConnection, session_id: str, tool_name: str, tool_input: Any
) -> list[RuleRecord]:
    """The rules that may decide this request, as the ask's context statement reads them."""
    here = _session_here(session_id)
    found = await conn.execute(
        select(here.c.project, *CANDIDATE_COLUMNS).select_from(
            R.join(here, candidates_on(here.c.id, here.c.task_id, here.c.project))
        ),
        candidate_params(tool_name, tool_input),
    )
    return candidates_of(list(found))[0]


# --- reads --------------------------------------------------------------------------------------


async def for_session(conn: AsyncConnection, session_id: str) -> list[RuleRecord]:
    """Every rule that applies to the session now, whatever its scope, in evaluation order."""
    here = _session_here(session_id)
    found = await conn.execute(
        select(R)
        .select_from(R.join(here, applicable(here.c.id, here.c.task_id, here.c.project)))
        .where(_live(bindparam("now", utcnow(), type_=R.c.expires_at.type)))
    )
    return in_evaluation_order([record(r._mapping) for r in found])


async def in_scope(conn: AsyncConnection, scope: Scope, scope_id: str | None) -> list[RuleRecord]:
    """The rules of one scope that have not expired, in evaluation order."""
    where = R.c.scope_id.is_(None) if scope_id is None else R.c.scope_id == scope_id
    found = await conn.execute(
        select(R).where(
            R.c.scope == scope.value, where, _live(bindparam("now", utcnow(), type_=R.c.expires_at.type))
        )
    )
    return in_evaluation_order([record(r._mapping) for r in found])


async def project_task_ids(conn: AsyncConnection, project: str) -> list[str]:
    """The tasks of a project, oldest first."""
    found = await conn.execute(select(T.c.id).where(T.c.project == project).order_by(T.c.created_at, T.c.id))
    return [r.id for r in found]


async def get(conn: AsyncConnection, rule_id: str) -> RuleRecord | None:
    row = (await conn.execute(select(R).where(R.c.id == rule_id))).first()
    return None if row is None else record(row._mapping)


async def decided_in_session(
    conn: AsyncConnection, session_id: str, rule_ids: Sequence[str]
) -> dict[str, tuple[int, dt.datetime]]:
    """How many requests of the session each rule decided as they were asked, and when it last did."""
    if not rule_ids:
        return {}
    rule = json_text(M.c.metadata, DECIDED_BY_RULE)
    found = await conn.execute(
        select(rule.label("rule_id"), func.count().label("n"), func.max(M.c.created_at).label("last"))
        .where(
            M.c.session_id == session_id,
            M.c.type == MESSAGE_KIND_PERMISSION,
            rule.in_(list(rule_ids)),
        )
        .group_by(rule)
    )
    return {r.rule_id: (int(r.n), r.last) for r in found}


# --- writes -------------------------------------------------------------------------------------


def _new(rule: NewRule) -> RuleRecord:
    return RuleRecord(
        id=new_id(),
        pattern=rule.pattern,
        behavior=rule.behavior,
        scope=rule.scope,
        scope_id=rule.scope_id,
        tool_name=rule.tool_name,
        input=rule.input if rule.exact else None,
        exact=rule.exact,
        expires_at=rule.expires_at,
        created_by=rule.created_by,
        source_pending_id=rule.source_pending_id,
        created_at=utcnow(),
    )


async def add(conn: AsyncConnection, rules: Sequence[NewRule]) -> list[RuleRecord]:
    """These rules, in one INSERT; a rule its scope already holds as it is (same pattern, behavior,
    input and expiry) is the one already there."""
    scopes = {(r.scope, r.scope_id) for r in rules}
    held: list[RuleRecord] = []
    for scope, scope_id in scopes:
        held.extend(await in_scope(conn, scope, scope_id))
    out: list[RuleRecord] = []
    written: list[RuleRecord] = []
    for rule in rules:
        same = next((h for h in held + written if rule.same_as(h)), None)
        if same is None:
            same = _new(rule)
            written.append(same)
        out.append(same)
    if written:
        await conn.execute(R.insert(), [_row(r) for r in written])
    return out


async def revoke(conn: AsyncConnection, rule_id: str) -> bool:
    """Remove a rule. The requests it decided keep it in their history (`RuleRef`)."""
    result = await conn.execute(delete(R).where(R.c.id == rule_id))
    return bool(result.rowcount)
