"""The approval surface: askPermission (the live waiter), respondToPermission, reads (rules:
`api/permission_rules.py`).

The same lifecycle as a clarification (`services/pending/`, kind `permission`); results
share the clarification's conflict and delivery-failure types, so a client handles a stale or
undeliverable decision the same way for both kinds.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

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
from backend.domain.rule_scopes import Scope
from backend.domain.states import PendingActionKind
from backend.services.permissions import RememberAs

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


# respondToPermission's arguments, each with its description.
DenyMessage = Annotated[
    str | None,
    strawberry.argument(
        description="DENY: the reason the agent is given, leading and trailing white space "
        "trimmed; empty after trimming is no reason (null)."
    ),
]
Remember = Annotated[
    bool,
    strawberry.argument(
        description="ALLOW: also an ALLOW rule: rememberPattern (one of the request's "
        "suggestions) where rememberScope says; without one, this exact call (Bash: "
        "Bash(<command>)). Not with an updatedInput that differs from the input asked unless a "
        "pattern or rememberAnyInput says what it allows (an exact rule would allow what the "
        "agent asked for, not the edit)."
    ),
]
RememberAnyInput = Annotated[
    bool,
    strawberry.argument(
        description="With remember: the rule allows any input of this tool, not only this one "
        "(the pattern is the bare tool name)."
    ),
]
RememberPattern = Annotated[
    str | None,
    strawberry.argument(
        description="With remember: the rule's pattern, in Claude Code's syntax; it must match "
        "the input allowed."
    ),
]
RememberScope = Annotated[
    Scope,
    strawberry.argument(
        description="With remember: SESSION (this session), TASK, PROJECT (every task of this "
        "task's project) or GLOBAL (admins only)."
    ),
]
RememberExpiresIn = Annotated[
    float | None,
    strawberry.argument(description="With remember: the rule expires after this many seconds."),
]


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
        message: DenyMessage = None,
        remember: Remember = False,
        remember_any_input: RememberAnyInput = False,
        remember_pattern: RememberPattern = None,
        remember_scope: RememberScope = Scope.SESSION,
        remember_expires_in_seconds: RememberExpiresIn = None,
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
            remember_as=RememberAs(remember_pattern, remember_scope, remember_expires_in_seconds),
            admin=principal.is_admin,
        )
        return _respond_result(result)


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
