"""Permission rules as people manage them: add one, import a Claude Code `permissions` block, show a
scope's block, list what applies to a session, revoke; and which stored rule decides a request.

Who may change the rules of a scope: SESSION and TASK, whoever may answer that task's requests;
PROJECT, whoever may answer a task of that project (an admin, any project); GLOBAL, an admin only.
Reading follows reading: a scope's rules are read by whoever may read its session or task (a
project's, whoever may read one of its tasks; the global rules, anyone signed in).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.domain.errors import Forbidden, InvalidInput, NotFound, TurnwiseError
from backend.domain.names import plain_name
from backend.domain.permissions import RuleRef, comparable
from backend.domain.rule_patterns import Behavior, PatternError, PatternKind, RulePattern, RuleSet
from backend.domain.rule_scopes import BEHAVIOR_ORDER, RuleBehavior, RuleRecord, Scope
from backend.domain.rule_syntax import export_settings, legacy_pattern, parse_pattern, parse_settings
from backend.lru import LRU
from backend.repository import permission_rules as repo
from backend.repository import tasks
from backend.repository.permission_rules import NewRule
from backend.services.context import Deps
from backend.services.uow import uow

log = logging.getLogger("turnwise.permission")

MAX_PATTERN = 4_000
MAX_RULES_IMPORTED = 1_000
MAX_EXPIRY_SECONDS = 10 * 366 * 24 * 3600.0  # ten years: longer is "never", which is no expiry
MAX_PROJECT = 1000  # as a task's project


@dataclass(frozen=True, slots=True)
class RuleAccess:
    """Who asks: `may_answer(task_id)` and `may_read(task_id)` raise NotFound or Forbidden unless the
    caller may answer (read) that task's requests; `admin` for the global scope."""

    may_answer: Callable[[str], None]
    may_read: Callable[[str], None]
    admin: bool


# --- which rule decides a request ---------------------------------------------------------------


# The rules compiled for recent asks, by their (behavior, pattern) in evaluation order: the same
# candidates ask after ask (a project's block, say) are compiled once.
_COMPILED: LRU[tuple[tuple[str, str], ...], RuleSet] = LRU(256)


def _parsed(rule: RuleRecord) -> RulePattern | None:
    """A stored pattern as the matcher reads it (`parse_pattern` keeps what it read)."""
    try:
        return parse_pattern(rule.pattern)
    except PatternError:  # stored by a version that read it otherwise: it decides nothing here
        log.warning(
            "a stored permission rule could not be read",
            extra={"event": "permission.rule_unreadable", "rule_id": rule.id},
        )
        return None


def _compiled(rules: Sequence[RuleRecord]) -> tuple[RuleSet, list[RuleRecord]]:
    """`rules` compiled (each decision's handle is its place in the list returned)."""
    readable = [(r, p) for r, p in ((r, _parsed(r)) for r in rules) if p is not None]
    key = tuple((r.behavior.value, p.text) for r, p in readable)
    compiled = _COMPILED.get(key)
    if compiled is None:
        entries = [(Behavior(r.behavior.value), p, i) for i, (r, p) in enumerate(readable)]
        compiled = RuleSet.compile(entries)
        _COMPILED.put(key, compiled)
    return compiled, [r for r, _ in readable]


def deciding_rule(
    rules: Sequence[RuleRecord], tool_name: str, tool_input: Any, *, project: str | None
) -> RuleRecord | None:
    """The rule that decides this request among `rules` (candidates in evaluation order): deny, then
    ask, then allow, the first that matches. A rule of this very tool with no specifier (the bare tool
    name, or one exact input, which the candidates' statement compared already) matches as it is; every
    other pattern is matched by `rule_patterns`."""
    direct = [r for r in rules if r.tool_name == tool_name and (r.exact or r.pattern == tool_name)]
    others = [r for r in rules if not (r.tool_name == tool_name and (r.exact or r.pattern == tool_name))]
    found: RuleRecord | None = None
    if others:
        compiled, readable = _compiled(others)
        decided = compiled.decide(tool_name, tool_input, project=project, home=None)
        found = None if decided is None else readable[decided[1]]
    first = direct[0] if direct else None  # in evaluation order already
    if first is not None and (
        found is None or BEHAVIOR_ORDER[first.behavior] < BEHAVIOR_ORDER[found.behavior]
    ):
        return first
    return found


def pattern_matches(pattern: RulePattern, tool_name: str, tool_input: Any, *, project: str | None) -> bool:
    """Would a rule of this pattern match this call?"""
    return (
        RuleSet.compile([(Behavior.ALLOW, pattern, None)]).decide(
            tool_name, tool_input, project=project, home=None
        )
        is not None
    )


def new_rule(
    pattern: RulePattern,
    behavior: RuleBehavior,
    scope: Scope,
    scope_id: str | None,
    created_by: str | None,
    *,
    expires_at: dt.datetime | None = None,
    source_pending_id: str | None = None,
) -> NewRule:
    """The rule of a pattern; one of an exact input (`Tool(=<json>)`) keeps that input to compare."""
    exact = pattern.kind is PatternKind.EXACT_INPUT
    return NewRule(
        pattern.text,
        behavior,
        scope,
        scope_id,
        pattern.tool,
        created_by,
        expires_at,
        input=json.loads(pattern.key) if exact else None,
        exact=exact,
        source_pending_id=source_pending_id,
    )


def remembered_rule(
    tool_name: str,
    tool_input: Any,
    *,
    any_input: bool,
    scope: Scope,
    scope_id: str | None,
    created_by: str | None,
    expires_at: dt.datetime | None,
    source_pending_id: str,
) -> NewRule:
    """The rule of "this exact call" (`Bash(<command>)`; for another tool, this input exactly) or,
    `any_input`, of the bare tool. A tool whose name no pattern can hold keeps its name as the
    pattern, and is matched by name (and input) without it being read."""
    try:
        pattern = legacy_pattern(tool_name, comparable(tool_input), any_input)
    except PatternError:
        pattern = None
    exact = not any_input and (pattern is None or pattern.kind is PatternKind.EXACT_INPUT)
    return NewRule(
        tool_name if pattern is None else pattern.text,
        RuleBehavior.ALLOW,
        scope,
        scope_id,
        tool_name,
        created_by,
        expires_at,
        input=tool_input if exact else None,
        exact=exact,
        source_pending_id=source_pending_id,
    )


def rule_ref(rule: RuleRecord) -> RuleRef:
    return RuleRef(
        rule.id,
        rule.tool_name,
        rule.any_input,
        rule.pattern,
        rule.behavior.value,
        rule.scope.value,
        rule.scope_id,
    )


def denied_message(rule: RuleRecord) -> str:
    """What the agent is told when a rule denies its request."""
    return (
        f"Denied by the rule {rule.pattern} ({rule.scope.value} scope): this tool call is not allowed here."
    )


# --- validating what a person sends -------------------------------------------------------------


def pattern_of(text: Any, field_name: str = "pattern") -> RulePattern:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(field_name, "is required")
    if len(text) > MAX_PATTERN:
        raise InvalidInput(field_name, f"must be at most {MAX_PATTERN} characters")
    try:
        return parse_pattern(text.strip())
    except PatternError as exc:
        raise InvalidInput(field_name, exc.reason) from None


def expiry_of(seconds: float | None, field_name: str = "expiresInSeconds") -> Any:
    """When a rule given this many seconds expires; None for none."""
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_EXPIRY_SECONDS:
        raise InvalidInput(
            field_name, f"must be a number of seconds above 0 and at most {MAX_EXPIRY_SECONDS:.0f}"
        )
    return utcnow() + timedelta(seconds=seconds)


def scope_id_of(scope: Scope, scope_id: str | None) -> str | None:
    if scope == Scope.GLOBAL:
        if scope_id is not None:
            raise InvalidInput("scopeId", "must be null for a GLOBAL rule: it applies everywhere")
        return None
    if scope_id is None or not str(scope_id).strip():
        what = "project (a task's project)" if scope == Scope.PROJECT else f"{scope.value} id"
        raise InvalidInput("scopeId", f"is required for a {scope.name} rule: the {what} it applies to")
    if scope == Scope.PROJECT:
        if len(scope_id) > MAX_PROJECT:
            raise InvalidInput("scopeId", f"must be at most {MAX_PROJECT} characters")
        return plain_name("scopeId", scope_id).strip()
    return str(scope_id)


async def authorize_scope(
    conn: AsyncConnection, scope: Scope, scope_id: str | None, access: RuleAccess, *, write: bool
) -> None:
    """NotFound (no such scope, or none the caller may see) or Forbidden unless the caller may change
    (`write`) or read the rules of this scope."""
    check = access.may_answer if write else access.may_read
    if scope == Scope.GLOBAL:
        if write and not access.admin:
            raise Forbidden("only an admin may add or revoke a GLOBAL rule")
        return
    if scope_id is None:
        raise InvalidInput("scopeId", f"is required for a {scope.name} rule")
    if scope == Scope.SESSION:
        session = await tasks.get_session(conn, scope_id)
        _as(check, session.task_id, "session", scope_id)
    elif scope == Scope.TASK:
        task = await tasks.get_task(conn, scope_id)
        _as(check, task.id, "task", scope_id)
    elif not access.admin:
        refused: TurnwiseError = NotFound("project", scope_id)
        for task_id in await repo.project_task_ids(conn, scope_id):
            try:
                check(task_id)
                return
            except Forbidden as exc:
                refused = exc
            except NotFound:
                continue
        raise refused


def _as(check: Callable[[str], None], task_id: str, what: str, ident: str) -> None:
    """`check(task_id)`, its NotFound naming the scope asked for, never the task behind it."""
    try:
        check(task_id)
    except NotFound:
        raise NotFound(what, ident) from None


# --- the rules service --------------------------------------------------------------------------


@dataclass
class PermissionRules:
    deps: Deps

    async def applying(self, session_id: str, access: RuleAccess) -> list[tuple[RuleRecord, int, Any]]:
        """Every rule that applies to the session now, in evaluation order, with how many of its
        requests each decided as they were asked and when it last did."""
        async with self.deps.db.read() as conn:
            await authorize_scope(conn, Scope.SESSION, session_id, access, write=False)
            found = await repo.for_session(conn, session_id)
            decided = await repo.decided_in_session(conn, session_id, [r.id for r in found])
        return [(r, *decided.get(r.id, (0, None))) for r in found]

    async def add(
        self,
        *,
        pattern: Any,
        behavior: RuleBehavior,
        scope: Scope,
        scope_id: str | None,
        expires_in: float | None,
        access: RuleAccess,
        created_by: str | None,
    ) -> RuleRecord:
        parsed = pattern_of(pattern)
        scope_id = scope_id_of(scope, scope_id)
        expires_at = expiry_of(expires_in)
        rule = new_rule(parsed, behavior, scope, scope_id, created_by, expires_at=expires_at)
        async with uow(self.deps) as w:
            await authorize_scope(w.conn, scope, scope_id, access, write=True)
            (added,) = await repo.add(w.conn, [rule])
        _logged("permission rule added", added)
        return added

    async def import_settings(
        self, settings: Any, scope: Scope, scope_id: str | None, access: RuleAccess, created_by: str | None
    ) -> list[RuleRecord]:
        """The rules of a Claude Code `permissions` block, all or none: an entry it cannot read is
        refused by its place in the block, and nothing is written."""
        if not isinstance(settings, dict):
            raise InvalidInput(
                "settings", 'must be a JSON object: {"allow": [...], "ask": [...], "deny": [...]}'
            )
        try:
            entries = parse_settings(settings)
        except PatternError as exc:
            raise InvalidInput("settings", exc.reason) from None
        if len(entries) > MAX_RULES_IMPORTED:
            raise InvalidInput("settings", f"must hold at most {MAX_RULES_IMPORTED} rules")
        scope_id = scope_id_of(scope, scope_id)
        rules = [new_rule(p, RuleBehavior(b.value), scope, scope_id, created_by) for b, p in entries]
        async with uow(self.deps) as w:
            await authorize_scope(w.conn, scope, scope_id, access, write=True)
            added = await repo.add(w.conn, rules)
        log.info(
            "permission rules imported",
            extra={"event": "permission.rules_imported", "scope": scope.value, "rules": len(added)},
        )
        return added

    async def settings(self, scope: Scope, scope_id: str | None, access: RuleAccess) -> dict[str, Any]:
        """The scope's rules as a Claude Code `permissions` block (rules for one exact input, which
        the syntax cannot say, are left out)."""
        scope_id = scope_id_of(scope, scope_id)
        async with self.deps.db.read() as conn:
            await authorize_scope(conn, scope, scope_id, access, write=False)
            found = await repo.in_scope(conn, scope, scope_id)
        readable = [(r, _parsed(r)) for r in found if not r.exact]
        block: dict[str, Any] = export_settings(
            [(Behavior(r.behavior.value), p) for r, p in readable if p is not None]
        )
        return block

    async def revoke(self, rule_id: str, access: RuleAccess) -> bool:
        """Remove a rule; False when there is none (or the caller may not see it). The requests it
        decided keep it, as it was, in their history."""
        async with uow(self.deps) as w:
            rule = await repo.get(w.conn, rule_id)
            if rule is None:
                return False
            try:
                await authorize_scope(w.conn, rule.scope, rule.scope_id, access, write=True)
            except NotFound:
                return False
            revoked = await repo.revoke(w.conn, rule_id)
        if revoked:
            _logged("permission rule revoked", rule)
        return revoked


def _logged(message: str, rule: RuleRecord) -> None:
    event = "permission.rule_revoked" if "revoked" in message else "permission.rule_created"
    log.info(
        message,
        extra={
            "event": event,
            "rule_id": rule.id,
            "behavior": rule.behavior.value,
            "scope": rule.scope.value,
        },
    )
