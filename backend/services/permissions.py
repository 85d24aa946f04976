"""Permission requests: the permission kind plugged into the pending-actions service.

Asking, waiting, detaching, superseding, claiming, confirming, resuming and recovery are the
lifecycle's own code (`PendingActions.ask_for`, `respond_for`); this module adds only what is
particular to a tool call: its validation, the decision's shape, and remembered rules. A request
that a rule of its session allows is decided at once, with no person asked, and recorded in the
session's history as an answered request naming its rule.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.domain.errors import InvalidInput, NotFound, present
from backend.domain.events import EventKind
from backend.domain.lifecycle import Answer, Bundle, Decided, RespondOutcome, WaitOutcome
from backend.domain.permissions import (
    ALLOW,
    DENY,
    Decision,
    RuleRef,
    Sent,
    permission_signature,
    request_of,
    validate_decision,
    validate_permission,
)
from backend.domain.states import PendingActionKind
from backend.repository import clarifications as repo
from backend.repository import permission_rules as rules
from backend.repository import tasks
from backend.repository.permission_rules import RuleRecord
from backend.services.pending.actions import PendingActions
from backend.services.pending.asking import Ask
from backend.services.pending.core import Authorize
from backend.services.pending.responding import Response
from backend.services.session_turn import session_and_turn
from backend.services.uow import Work, uow

log = logging.getLogger("turnwise.permission")
KIND = PendingActionKind.PERMISSION


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
        """Yields `Decided` alone when a rule allows the call; otherwise `Asked`, then exactly one
        of Answered (allowed) / Rejected (denied) / Detached / Closed. An invalid request raises
        InvalidInput here, before anything is written."""
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
                decided=lambda w: self._decide_by_rule(w, session_id, spec, context, signature),
            )
        )

    async def _decide_by_rule(
        self, w: Work, session_id: str, spec: Any, context: str | None, signature: str
    ) -> Decided | None:
        """In the ask's unit of work, under the session's lock: the request decided by a rule of its
        session (its row written answered, naming the rule), or None to ask a person."""
        conn = w.conn
        rule = await rules.matching(conn, session_id, spec.tool_name, spec.input)
        if rule is None:
            return None
        session, turn_id = await session_and_turn(w, session_id, "permission requests")
        decision = Decision(
            ALLOW, updated_input=spec.input, auto=True, rule=RuleRef(rule.id, rule.tool_name, rule.any_input)
        )
        record = await repo.insert_decided(
            conn,
            session_id=session_id,
            turn_id=turn_id,
            spec=spec,
            context=context,
            signature=signature,
            response=decision.as_response(),
        )
        w.publish_messages(session.task_id, session_id, EventKind.MESSAGE_ADDED, [record.id])
        pending_id = str(record.metadata["pending_id"])
        log.info(
            "permission allowed by a rule",
            extra={
                "event": "permission.auto_allowed",
                "pending_id": pending_id,
                "session_id": session_id,
                "rule_id": rule.id,
                "tool_name": spec.tool_name,
            },
        )
        return Decided(pending_id, (decision,))

    async def respond(
        self, pending_id: str, sent: Sent, *, decided_by: str | None, authorize: Authorize
    ) -> RespondOutcome:
        """Allow (maybe with an edited input, maybe remembered as a session rule) or deny (maybe with
        a reason for the agent). A denial is final like a skipped question: it never resumes a
        detached agent, which was already told "denied for now"."""
        behavior = sent.behavior.lower()
        if behavior not in (ALLOW, DENY):
            raise InvalidInput("behavior", "must be ALLOW or DENY")

        def check(bundle: Bundle) -> Mapping[str, Answer | Decision]:
            request = present(request_of(bundle.rows[0].metadata), f"tool request of {pending_id}")
            decision = validate_decision(request, sent)
            return {decision.question_id: decision}

        async def remembered(conn: AsyncConnection, bundle: Bundle, valid: Mapping[str, Any]) -> None:
            (decision,) = valid.values()
            if not (isinstance(decision, Decision) and decision.remember):
                return
            request = present(request_of(bundle.rows[0].metadata), f"tool request of {pending_id}")
            rule = await rules.remember(
                conn,
                session_id=bundle.session_id,
                tool_name=str(request.get("tool_name")),
                # What the person approved: the input asked for (an exact-input rule takes no edit of
                # it, `validate_decision`); none for a rule of any input.
                tool_input=decision.updated_input,
                any_input=decision.remember_any_input,
                created_by=decided_by,
                source_pending_id=pending_id,
            )
            log.info(
                "permission rule remembered",
                extra={"event": "permission.rule_created", "rule_id": rule.id, "pending_id": pending_id},
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
        async with self.lifecycle.deps.db.read() as conn:
            session = await tasks.get_session(conn, session_id)
            authorize(session.task_id, session.id)
            return await rules.for_sessions(conn, [session_id])

    async def revoke(self, rule_id: str, *, authorize: Authorize) -> bool:
        """Remove a rule; False when there is none (or the caller may not see it)."""
        async with uow(self.lifecycle.deps) as w:
            rule = await rules.get(w.conn, rule_id)
            if rule is None:
                return False
            session = await tasks.get_session(w.conn, rule.session_id)
            try:
                authorize(session.task_id, session.id)
            except NotFound:
                return False
            revoked = await rules.revoke(w.conn, rule_id)
        if revoked:
            log.info(
                "permission rule revoked", extra={"event": "permission.rule_revoked", "rule_id": rule_id}
            )
        return revoked
