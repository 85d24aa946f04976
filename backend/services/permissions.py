"""Permission requests: the permission kind plugged into the pending-actions service.

Asking, waiting, detaching, superseding, claiming, confirming, resuming and recovery are the
lifecycle's own code (`PendingActions.ask_for`, `respond_for`); this module adds only what is
particular to a tool call: its validation, the decision's shape, and rules. A request that a rule
reaching its session allows or denies is decided at once, with no person asked, and recorded in the
session's history as a settled request naming its rule (`services/permission_rules.py` says which
rule decides; the rules come with the ask's own context statement).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.domain.errors import Forbidden, InvalidInput, present
from backend.domain.events import EventKind
from backend.domain.lifecycle import Answer, Bundle, Decided, RespondOutcome, WaitOutcome
from backend.domain.permissions import (
    ALLOW,
    DENY,
    Decision,
    Sent,
    permission_signature,
    request_of,
    validate_decision,
    validate_permission,
)
from backend.domain.rule_patterns import RulePattern
from backend.domain.rule_scopes import RuleBehavior, RuleRecord, Scope
from backend.domain.states import ClarificationStatus, PendingActionKind
from backend.repository import asks, tasks
from backend.repository import permission_rules as rules
from backend.repository.asks import AskContext
from backend.services.pending.actions import PendingActions
from backend.services.pending.asking import Ask
from backend.services.pending.core import Authorize
from backend.services.pending.responding import Response
from backend.services.permission_rules import (
    PermissionRules,
    RuleAccess,
    deciding_rule,
    denied_message,
    expiry_of,
    new_rule,
    pattern_matches,
    pattern_of,
    remembered_rule,
    rule_ref,
)
from backend.services.session_turn import turn_for_new_rows
from backend.services.uow import Work

log = logging.getLogger("turnwise.permission")
KIND = PendingActionKind.PERMISSION


@dataclass(frozen=True, slots=True)
class RememberAs:
    """The rule an ALLOW with remember creates: its pattern (None: this exact call, or the bare tool
    with rememberAnyInput), where it applies, and for how long (seconds; None: until revoked)."""

    pattern: str | None = None
    scope: Scope = Scope.SESSION
    expires_in: float | None = None


@dataclass
class Permissions:
    lifecycle: PendingActions

    def ask(
        self,
        session_id: str,
        tool_name: Any,
        tool_input: Any,
        tool_use_id: Any = None,
        context: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AsyncGenerator[WaitOutcome, None]:
        """Yields `Decided` alone when a rule allows or denies the call; otherwise `Asked`, then
        exactly one of Answered (allowed) / Rejected (denied) / Detached / Closed. An invalid request
        raises InvalidInput here, before anything is written."""
        spec = validate_permission(tool_name, tool_input, tool_use_id, context)
        wait_seconds = self.lifecycle.wait_seconds(timeout_seconds)
        signature = permission_signature(spec, context)
        return self.lifecycle.ask_for(
            Ask(
                KIND,
                session_id,
                (spec,),
                context,
                signature,
                wait_seconds,
                rules=rules.candidate_params(spec.tool_name, spec.input),
                decided=lambda w, found: self._decide_by_rule(w, found, spec, context, signature),
            )
        )

    async def _decide_by_rule(
        self, w: Work, found: AskContext, spec: Any, context: str | None, signature: str
    ) -> Decided | None:
        """In the ask's unit of work, under the session's lock, from the rules its context read: the
        request decided by the first rule that matches (deny, ask, allow), its row written settled
        and naming the rule; None to ask a person (no rule matched, or an ask rule did)."""
        rule = deciding_rule(found.rules, spec.tool_name, spec.input, project=found.project)
        if rule is None or rule.behavior == RuleBehavior.ASK:
            return None
        session = found.session
        turn_id = await turn_for_new_rows(w, session, found.turn_id, "permission requests")
        if turn_id == found.turn_id:
            # A request settled as it is written changes no pending action (nor, in its turn, any
            # summary): the live projector need not read it again.
            w.projected = True
        allowed = rule.behavior == RuleBehavior.ALLOW
        ref = rule_ref(rule)
        if allowed:
            decision = Decision(ALLOW, updated_input=spec.input, auto=True, rule=ref)
        else:
            decision = Decision(DENY, message=denied_message(rule), auto=True, rule=ref)
        record = await asks.insert_decided(
            w.conn,
            session_id=session.id,
            turn_id=turn_id,
            spec=spec,
            context=context,
            signature=signature,
            response=decision.as_response(),
            status=ClarificationStatus.ANSWERED if allowed else ClarificationStatus.REJECTED,
            extra={rules.DECIDED_BY_RULE: rule.id},
        )
        w.publish_messages(session.task_id, session.id, EventKind.MESSAGE_ADDED, [record.id])
        pending_id = str(record.metadata["pending_id"])
        log.info(
            "permission allowed by a rule" if allowed else "permission denied by a rule",
            extra={
                "event": "permission.auto_allowed" if allowed else "permission.auto_denied",
                "pending_id": pending_id,
                "session_id": session.id,
                "rule_id": rule.id,
                "scope": rule.scope.value,
                "tool_name": spec.tool_name,
            },
        )
        return Decided(pending_id, (decision,))

    async def respond(
        self,
        pending_id: str,
        sent: Sent,
        *,
        decided_by: str | None,
        authorize: Authorize,
        remember_as: RememberAs | None = None,
        admin: bool = False,
    ) -> RespondOutcome:
        """Allow (maybe with an edited input, maybe remembered as a rule: `remember_as`) or deny (maybe
        with a reason for the agent). A denial is final like a skipped question: it never resumes a
        detached agent, which was already told "denied for now"."""
        behavior = sent.behavior.lower()
        if behavior not in (ALLOW, DENY):
            raise InvalidInput("behavior", "must be ALLOW or DENY")
        how = remember_as or RememberAs()
        pattern, expires_at = _remembering(sent, how, admin=admin)

        def check(bundle: Bundle) -> Mapping[str, Answer | Decision]:
            request = present(request_of(bundle.rows[0].metadata), f"tool request of {pending_id}")
            decision = validate_decision(request, sent, pattern_rule=pattern is not None)
            return {decision.question_id: decision}

        async def remembered(conn: AsyncConnection, bundle: Bundle, valid: Mapping[str, Any]) -> None:
            (decision,) = valid.values()
            if not (isinstance(decision, Decision) and decision.remember):
                return
            request = present(request_of(bundle.rows[0].metadata), f"tool request of {pending_id}")
            rule = await remember_rule(
                conn, bundle, request, decision, pattern, how.scope, expires_at, decided_by, pending_id
            )
            log.info(
                "permission rule remembered",
                extra={
                    "event": "permission.rule_created",
                    "rule_id": rule.id,
                    "pending_id": pending_id,
                    "scope": rule.scope.value,
                },
            )

        return await self.lifecycle.respond_for(
            Response(
                pending_id,
                KIND,
                check,
                behavior == DENY,
                authorize,
                on_claimed=remembered,
                decided_by=decided_by,
            )
        )

    async def request(self, pending_id: str, *, authorize: Authorize) -> Bundle | None:
        bundle = await self.lifecycle.bundle(pending_id, authorize=authorize)
        return bundle if bundle is not None and bundle.kind == KIND else None

    async def active(self, session_ids: Sequence[str]) -> dict[str, Bundle]:
        return await self.lifecycle.active_bundles(session_ids, KIND)

    async def rules(self, session_id: str, *, authorize: Authorize) -> list[RuleRecord]:
        """Every rule that applies to the session, in evaluation order (`authorize`: may read it)."""
        book = PermissionRules(self.lifecycle.deps)
        return [r for r, _, _ in await book.applying(session_id, _access(authorize, admin=False))]

    async def revoke(self, rule_id: str, *, authorize: Authorize, admin: bool = False) -> bool:
        """Remove a rule; False when there is none (or the caller may not see it)."""
        return await PermissionRules(self.lifecycle.deps).revoke(rule_id, _access(authorize, admin=admin))


def _remembering(sent: Sent, how: RememberAs, *, admin: bool) -> tuple[RulePattern | None, Any]:
    """The pattern and expiry of the rule a decision remembers, or InvalidInput (Forbidden for a
    GLOBAL rule of a person who is no admin) before anything is written."""
    if not sent.remember:
        for given, name in (
            (how.pattern is not None, "rememberPattern"),
            (how.scope != Scope.SESSION, "rememberScope"),
            (how.expires_in is not None, "rememberExpiresInSeconds"),
        ):
            if given:
                raise InvalidInput(name, "needs remember: true")
    pattern = None if how.pattern is None else pattern_of(how.pattern, "rememberPattern")
    if pattern is not None and sent.remember_any_input:
        raise InvalidInput(
            "rememberAnyInput", "goes without a rememberPattern (the pattern says what it allows)"
        )
    if how.scope == Scope.GLOBAL and sent.remember and not admin:
        raise Forbidden("only an admin may remember a GLOBAL rule")
    return pattern, expiry_of(how.expires_in, "rememberExpiresInSeconds")


def _access(authorize: Authorize, *, admin: bool) -> RuleAccess:
    def check(task_id: str) -> None:
        authorize(task_id, None)

    return RuleAccess(check, check, admin)


async def remember_rule(
    conn: AsyncConnection,
    bundle: Bundle,
    request: Mapping[str, Any],
    decision: Decision,
    pattern: RulePattern | None,
    scope: Scope,
    expires_at: Any,
    decided_by: str | None,
    pending_id: str,
) -> RuleRecord:
    """The rule an ALLOW with remember creates, in the claim's transaction: `pattern` where it matches
    what the person allowed; else the bare tool (rememberAnyInput) or this exact call."""
    tool_name = str(request.get("tool_name"))
    project = (await tasks.get_task(conn, bundle.task_id)).project
    if scope == Scope.PROJECT and project is None:
        raise InvalidInput("rememberScope", "PROJECT needs a task with a project; this task has none")
    scope_id = {
        Scope.SESSION: bundle.session_id,
        Scope.TASK: bundle.task_id,
        Scope.PROJECT: project,
        Scope.GLOBAL: None,
    }[scope]
    if pattern is None:
        new = remembered_rule(
            tool_name,
            decision.updated_input,
            any_input=decision.remember_any_input,
            scope=scope,
            scope_id=scope_id,
            created_by=decided_by,
            expires_at=expires_at,
            source_pending_id=pending_id,
        )
    elif pattern_matches(pattern, tool_name, decision.updated_input, project=project):
        new = new_rule(
            pattern,
            RuleBehavior.ALLOW,
            scope,
            scope_id,
            decided_by,
            expires_at=expires_at,
            source_pending_id=pending_id,
        )
    else:
        raise InvalidInput(
            "rememberPattern",
            f"{pattern.text} does not match this call of {tool_name}: a rule with it would not allow "
            "what you allow; choose one of the request's suggestions",
        )
    (rule,) = await rules.add(conn, [new])
    return rule
