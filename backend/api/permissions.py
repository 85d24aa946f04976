"""The approval surface: askPermission (the live waiter), respondToPermission, rules, reads.

The same lifecycle as a clarification (`services/pending/`, kind `permission`); results
share the clarification's conflict and delivery-failure types, so a client handles a stale or
undeliverable decision the same way for both kinds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncGenerator
from typing import Annotated, Any

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from backend.api.access import require_session_read
from backend.api.clarifications import (
    QUEUED,
    ClarificationConflict,
    ClarificationDeliveryFailed,
    TimeoutSeconds,
    answering,
    count_respond,
    live_wait,
    not_responded,
    readable_bundle,
    require_asker,
)
from backend.api.context import Context
from backend.api.types import PermissionBehavior, PermissionDecision, PermissionRequest
from backend.domain import lifecycle as lc
from backend.domain.errors import BrokenInvariant
from backend.domain.permissions import Decision, Sent
from backend.domain.states import PendingActionKind
from backend.repository.permission_rules import RuleRecord


@strawberry.type(
    description="A remembered ALLOW: requests of this session for this tool are allowed at once."
)
class PermissionRule:
    id: strawberry.ID
    session_id: strawberry.ID
    tool_name: str
    input: JSON | None = strawberry.field(description="The one input it allows; null: any input.")
    created_at: dt.datetime

    @classmethod
    def of(cls, r: RuleRecord) -> PermissionRule:
        return cls(
            id=strawberry.ID(r.id),
            session_id=strawberry.ID(r.session_id),
            tool_name=r.tool_name,
            input=None if r.any_input else r.input,
            created_at=r.created_at,
        )


# --- outcomes for the agent ---------------------------------------------------------------------


@strawberry.type
class PermissionAsked:
    request: PermissionRequest


@strawberry.type(description="The decision, for the agent: run the tool with updatedInput, or do not.")
class PermissionDecided:
    pending_id: strawberry.ID
    decision: PermissionDecision


@strawberry.type(description="No decision within the wait: deny for now; the request stays open.")
class PermissionDetached:
    pending_id: strawberry.ID


@strawberry.type(description="The request takes no decision any more (cancelled, expired or superseded).")
class PermissionClosed:
    pending_id: strawberry.ID


PermissionOutcome = Annotated[
    PermissionAsked | PermissionDecided | PermissionDetached | PermissionClosed,
    strawberry.union("PermissionOutcome"),
]


def _decided(pending_id: str, answers: tuple[Any, ...]) -> PermissionDecided:
    decisions = [a for a in answers if isinstance(a, Decision)]
    if not decisions:
        raise BrokenInvariant(f"permission {pending_id} was decided without a decision")
    return PermissionDecided(
        pending_id=strawberry.ID(pending_id), decision=PermissionDecision.of(decisions[0])
    )


def permission_outcome(o: lc.WaitOutcome) -> Any:
    """The GraphQL outcome of a permission ask's lifecycle outcome (askPermission, runnerAskPermission)."""
    if isinstance(o, lc.Asked):
        return PermissionAsked(request=PermissionRequest.of(o.bundle))
    if isinstance(o, lc.Answered | lc.Rejected | lc.Decided):
        return _decided(o.pending_id, o.answers)
    if isinstance(o, lc.Detached):
        return PermissionDetached(pending_id=strawberry.ID(o.pending_id))
    return PermissionClosed(pending_id=strawberry.ID(o.pending_id))


# --- respond results ----------------------------------------------------------------------------


@strawberry.type
class PermissionResponded:
    request: PermissionRequest
    resumed: bool
    queued: bool = strawberry.field(default=False, description=QUEUED)


RespondToPermissionResult = Annotated[
    PermissionResponded | ClarificationConflict | ClarificationDeliveryFailed,
    strawberry.union("RespondToPermissionResult"),
]


def _respond_result(r: lc.RespondOutcome) -> RespondToPermissionResult:
    count_respond(r, PendingActionKind.PERMISSION)
    if isinstance(r, lc.Responded):
        return PermissionResponded(request=PermissionRequest.of(r.bundle), resumed=r.resumed, queued=r.queued)
    return not_responded(r, with_bundle=False)


# --- resolvers ----------------------------------------------------------------------------------


@strawberry.type
class PermissionQueries:
    @strawberry.field(
        description="One permission request with its derived state; null when unknown or not readable."
    )
    async def permission(
        self, info: Info[Context, None], pending_id: strawberry.ID
    ) -> PermissionRequest | None:
        bundle = await readable_bundle(info, str(pending_id), PendingActionKind.PERMISSION)
        return None if bundle is None else PermissionRequest.of(bundle)

    @strawberry.field(description="The session's remembered rules, oldest first.")
    async def permission_rules(
        self, info: Info[Context, None], session_id: strawberry.ID
    ) -> list[PermissionRule]:
        principal = info.context.principal
        found = await info.context.services.permissions.rules(
            # Refused as an unknown session is: the error names the session asked for, never its task.
            str(session_id),
            authorize=lambda task_id, s: require_session_read(principal, str(s), task_id),
        )
        return [PermissionRule.of(r) for r in found]


@strawberry.type
class PermissionMutations:
    @strawberry.mutation(
        description="Allow (maybe with an edited input, maybe remembered for this session) or deny (maybe "
        "with a reason) a tool call; one result per request state, like respondToClarification."
    )
    async def respond_to_permission(
        self,
        info: Info[Context, None],
        pending_id: strawberry.ID,
        behavior: PermissionBehavior,
        updated_input: JSON | None = strawberry.UNSET,
        message: Annotated[
            str | None,
            strawberry.argument(
                description="DENY: the reason the agent is given, leading and trailing white space "
                "trimmed; empty after trimming is no reason (null)."
            ),
        ] = None,
        remember: Annotated[
            bool,
            strawberry.argument(
                description="ALLOW: also a rule of this session allowing this tool with this input. Not "
                "with an updatedInput that differs from the input asked (the rule would allow what "
                "the agent asked for, not the edit), unless rememberAnyInput."
            ),
        ] = False,
        remember_any_input: Annotated[
            bool,
            strawberry.argument(
                description="With remember: the rule allows any input of this tool, not only this one."
            ),
        ] = False,
    ) -> RespondToPermissionResult:
        principal = info.context.principal
        has_input = updated_input is not strawberry.UNSET and updated_input is not None
        sent = Sent(
            behavior.value,
            updated_input=updated_input if has_input else None,
            has_updated_input=has_input,
            message=message,
            remember=remember,
            remember_any_input=remember_any_input,
        )
        result = await info.context.services.permissions.respond(
            str(pending_id),
            sent,
            decided_by=principal.user_id,
            authorize=answering(principal, "permission", str(pending_id)),
        )
        return _respond_result(result)

    @strawberry.mutation(description="Forget a remembered rule; false when there is no such rule.")
    async def revoke_permission_rule(self, info: Info[Context, None], rule_id: strawberry.ID) -> bool:
        principal = info.context.principal
        return await info.context.services.permissions.revoke(
            str(rule_id), authorize=answering(principal, "permission rule", str(rule_id))
        )


@strawberry.type
class PermissionSubscriptions:
    @strawberry.subscription(
        description="Ask the session's user to allow a tool call: yields PermissionAsked, then waits for "
        "exactly one of Decided / Detached (timeout: deny for now) / Closed; or PermissionDecided at "
        "once when a remembered rule allows it. Disconnecting detaches."
    )
    async def ask_permission(
        self,
        info: Info[Context, None],
        session_id: strawberry.ID,
        tool_name: str,
        input: Annotated[
            JSON, strawberry.argument(description="The tool's input: a JSON object, its arguments by name.")
        ],
        tool_use_id: str | None = None,
        context: str | None = None,
        timeout_seconds: TimeoutSeconds = None,
    ) -> AsyncGenerator[PermissionOutcome, None]:
        await require_asker(info, str(session_id))
        stream = info.context.services.permissions.ask(
            str(session_id), tool_name, input, tool_use_id, context, timeout_seconds
        )
        async with live_wait(stream, PendingActionKind.PERMISSION) as outcomes:
            async for outcome in outcomes:
                yield permission_outcome(outcome)
