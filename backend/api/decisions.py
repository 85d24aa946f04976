"""The audit trail: `decisions(taskId, sessionId, first)`, every settled pending action the caller may
read, newest decision first, with who decided what."""

from __future__ import annotations

import datetime as dt
from typing import cast

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from backend import metrics
from backend.api import access
from backend.api.context import Context
from backend.domain.decisions import SYSTEM, UNKNOWN, outcome_of
from backend.domain.errors import NotFound
from backend.domain.lifecycle import Bundle
from backend.domain.states import PendingActionKind
from backend.services.decisions import DEFAULT_FIRST, DecisionView


def observe_decided(bundle: Bundle) -> None:
    """A person's response to `bundle` was taken: its wait, by kind and outcome (`/metrics`)."""
    outcome = outcome_of(bundle.kind, bundle.rows)
    if outcome is not None:
        metrics.observe_decision(bundle.kind.value, outcome.value, bundle.asked_at)


@strawberry.type(description="A settled pending action: who decided what, and when.")
class Decision:
    pending_id: strawberry.ID
    kind: PendingActionKind
    task_id: strawberry.ID
    session_id: strawberry.ID
    asked_at: dt.datetime
    decided_at: dt.datetime
    decided_by: str = strawberry.field(
        description=f'The deciding person\'s user name; "rule <ruleId>" when a remembered rule decided; '
        f'"{SYSTEM}" for expiry, supersede and cancel; "{UNKNOWN}" for a person\'s decision stored '
        "before who decided was kept."
    )
    outcome: str = strawberry.field(
        description="ANSWERED, SKIPPED, ALLOWED, DENIED, EXPIRED, CANCELLED or SUPERSEDED."
    )
    summary: str = strawberry.field(
        description='As a person reads it: "allowed Bash: npm test", "answered: PostgreSQL".'
    )
    edited: bool = strawberry.field(description="ALLOWED with an input that differs from the one asked.")
    message: str | None = strawberry.field(description="A deny's reason, as the agent received it.")
    updated_input: JSON | None = strawberry.field(description="The input an edited allow delivered.")
    rule_id: strawberry.ID | None

    @classmethod
    def of(cls, d: DecisionView) -> Decision:
        r = d.reading
        return cls(
            pending_id=strawberry.ID(d.bundle.pending_id),
            kind=d.bundle.kind,
            task_id=strawberry.ID(d.bundle.task_id),
            session_id=strawberry.ID(d.bundle.session_id),
            asked_at=d.asked_at,
            decided_at=d.decided_at,
            decided_by=r.decided_by,
            outcome=r.outcome.value,
            summary=r.summary,
            edited=r.edited,
            message=r.message,
            updated_input=cast(JSON, r.updated_input),
            rule_id=None if r.rule_id is None else strawberry.ID(r.rule_id),
        )


@strawberry.type
class DecisionQueries:
    @strawberry.field(
        description="The audit trail of a session, of a task, or (neither given) of every task the "
        "caller may read: settled pending actions, newest decision first."
    )
    async def decisions(
        self,
        info: Info[Context, None],
        task_id: strawberry.ID | None = None,
        session_id: strawberry.ID | None = None,
        first: int | None = DEFAULT_FIRST,
    ) -> list[Decision]:
        context = info.context
        services, principal = context.services, context.principal
        limit = DEFAULT_FIRST if first is None else first
        if session_id is not None:
            sid = str(session_id)
            try:
                owner = await services.access.session_owner(sid)
            except NotFound:
                raise NotFound("session", sid) from None
            access.require_session_read(principal, sid, owner)
            if task_id is not None and str(task_id) != owner:
                raise NotFound("session", sid)
            found = await services.decisions.trail(session_id=sid, first=limit)
        elif task_id is not None:
            tid = str(task_id)
            access.require_task_read(principal, tid)
            await services.reads.task(tid)
            found = await services.decisions.trail(task_ids=[tid], first=limit)
        else:
            readable = access.readable_task_ids(principal)
            tasks = None if readable is None else sorted(readable)
            found = await services.decisions.trail(task_ids=tasks, first=limit)
        return [Decision.of(d) for d in found]
