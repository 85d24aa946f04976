"""The clarification surface: askClarification (the live waiter), respond, cancel, read, advanceTask."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import strawberry
from strawberry.types import Info

from backend import metrics
from backend.api.access import require_session_agent, require_task_answer, require_task_read
from backend.api.context import Context
from backend.api.decisions import observe_decided
from backend.api.inputs import compiled_input
from backend.api.types import (
    ClarificationBundle,
    Task,
)
from backend.domain import lifecycle as lc
from backend.domain.errors import BrokenInvariant, NotFound
from backend.domain.lifecycle import ConflictReason
from backend.domain.states import ClarificationStatus, PendingActionKind
from backend.services.pending.actions import TaskAdvanceBlocked as AdvanceBlocked
from backend.services.pending.core import Authorize

# --- inputs -------------------------------------------------------------------------------------


@compiled_input
@strawberry.input
class ClarificationOptionInput:
    id: strawberry.ID | None = None
    label: str
    description: str | None = None


@compiled_input
@strawberry.input
class ClarificationQuestionInput:
    id: strawberry.ID | None = None
    title: str | None = None
    prompt: str
    options: list[ClarificationOptionInput]
    multi_select: bool | None = False


@compiled_input
@strawberry.input
class ClarificationAnswerInput:
    question_id: strawberry.ID
    selected_option_ids: list[strawberry.ID] = strawberry.field(default_factory=list)
    custom_text: str | None = None


def _question_dict(q: ClarificationQuestionInput) -> dict[str, Any]:
    return {
        "id": None if q.id is None else str(q.id),
        "title": q.title,
        "prompt": q.prompt,
        "multi_select": bool(q.multi_select),
        "options": [
            {"id": None if o.id is None else str(o.id), "label": o.label, "description": o.description}
            for o in q.options
        ],
    }


# --- outcomes for the agent ---------------------------------------------------------------------


@strawberry.type
class ClarificationAnswer:
    question_id: strawberry.ID
    selected_option_ids: list[strawberry.ID]
    custom_text: str | None


@strawberry.type
class ClarificationAsked:
    bundle: ClarificationBundle


@strawberry.type
class ClarificationAnswered:
    pending_id: strawberry.ID
    answers: list[ClarificationAnswer]


@strawberry.type
class ClarificationRejected:
    pending_id: strawberry.ID


@strawberry.type
class ClarificationDetached:
    pending_id: strawberry.ID


@strawberry.type(
    description="The question takes no answer any more: cancelled or expired with its session (that "
    "status), or superseded by a newer turn (status PENDING: it stays in history, inert)."
)
class ClarificationClosed:
    pending_id: strawberry.ID
    status: ClarificationStatus


ClarificationOutcome = Annotated[
    ClarificationAsked
    | ClarificationAnswered
    | ClarificationRejected
    | ClarificationDetached
    | ClarificationClosed,
    strawberry.union("ClarificationOutcome"),
]


def _outcome(o: lc.WaitOutcome) -> Any:
    if isinstance(o, lc.Asked):
        return ClarificationAsked(bundle=ClarificationBundle.of(o.bundle))
    if isinstance(o, lc.Answered):
        return ClarificationAnswered(
            pending_id=strawberry.ID(o.pending_id),
            answers=[
                ClarificationAnswer(
                    question_id=strawberry.ID(a.question_id),
                    selected_option_ids=[strawberry.ID(s) for s in a.selected_option_ids],
                    custom_text=a.custom_text,
                )
                for a in o.answers
                if isinstance(a, lc.Answer)
            ],
        )
    if isinstance(o, lc.Rejected):
        return ClarificationRejected(pending_id=strawberry.ID(o.pending_id))
    if isinstance(o, lc.Detached):
        return ClarificationDetached(pending_id=strawberry.ID(o.pending_id))
    if isinstance(o, lc.Closed):
        return ClarificationClosed(
            pending_id=strawberry.ID(o.pending_id), status=ClarificationStatus(o.status)
        )
    raise BrokenInvariant(f"a clarification ended {type(o).__name__}")


# --- respond results ----------------------------------------------------------------------------


QUEUED = (
    "No agent was connected: the response waits in the session's inbox and reaches the agent exactly "
    "once when it comes back (agentPrompts, or MCP wait_for_answer)."
)

# The agent's wait, for every kind of pending action.
TimeoutSeconds = Annotated[
    float | None,
    strawberry.argument(
        description="Seconds to wait for the person before the wait detaches (ClarificationDetached, "
        "PermissionDetached; more than 0). Null or left out: the longest wait the server allows "
        "(TURNWISE_MAX_WAIT_SECONDS, 7200 by default), which also caps larger values."
    ),
]


@strawberry.type
class ClarificationResponded:
    bundle: ClarificationBundle
    resumed: bool
    queued: bool = strawberry.field(default=False, description=QUEUED)


@strawberry.type
class ClarificationConflict:
    pending_id: strawberry.ID
    reason: ConflictReason
    bundle: ClarificationBundle | None


@strawberry.type
class ClarificationDeliveryFailed:
    pending_id: strawberry.ID
    retryable: bool
    message: str


RespondToClarificationResult = Annotated[
    ClarificationResponded | ClarificationConflict | ClarificationDeliveryFailed,
    strawberry.union("RespondToClarificationResult"),
]


@strawberry.type
class TaskAdvanced:
    task: Task


@strawberry.type
class TaskAdvanceBlocked:
    task_id: strawberry.ID
    reason: str
    session_id: strawberry.ID | None


AdvanceTaskResult = Annotated[TaskAdvanced | TaskAdvanceBlocked, strawberry.union("AdvanceTaskResult")]


def count_respond(r: lc.RespondOutcome, kind: PendingActionKind) -> None:
    questions = kind == PendingActionKind.CLARIFICATION
    if isinstance(r, lc.Responded):
        observe_decided(r.bundle)
        if r.resumed:
            metrics.RESUME_OUTCOMES.labels(kind=kind.value, outcome="resumed").inc()
    elif isinstance(r, lc.Conflict):
        metrics.PENDING_CONFLICTS.labels(kind=kind.value, reason=r.reason.value).inc()
        if questions:
            metrics.CONFLICTS.labels(r.reason.value).inc()
    else:
        outcome = "retryable_failure" if r.retryable else "final_failure"
        metrics.RESUME_OUTCOMES.labels(kind=kind.value, outcome=outcome).inc()


def count_outcome(o: lc.WaitOutcome, kind: PendingActionKind) -> None:
    questions = kind == PendingActionKind.CLARIFICATION
    if isinstance(o, lc.Asked):
        metrics.PENDING_ASKS.labels(kind.value).inc()
        if questions:
            metrics.ASKS.inc()
    elif isinstance(o, lc.Answered | lc.Rejected):
        metrics.PENDING_LIVE_ANSWERS.labels(kind.value).inc()
        if questions:
            metrics.LIVE_ANSWERS.inc()
    elif isinstance(o, lc.Detached):
        metrics.PENDING_DETACHES.labels(kind.value).inc()
        if questions:
            metrics.DETACHES.inc()


def not_responded(
    r: lc.Conflict | lc.DeliveryFailed, *, with_bundle: bool
) -> ClarificationConflict | ClarificationDeliveryFailed:
    """A respond that took no effect, for either kind (a conflict carries a clarification's bundle,
    so a losing client can show the winning answer)."""
    if isinstance(r, lc.Conflict):
        bundle = r.bundle if with_bundle else None
        return ClarificationConflict(
            pending_id=strawberry.ID(r.pending_id),
            reason=r.reason,
            bundle=None if bundle is None else ClarificationBundle.of(bundle),
        )
    return ClarificationDeliveryFailed(
        pending_id=strawberry.ID(r.pending_id), retryable=r.retryable, message=r.message
    )


def _respond_result(r: lc.RespondOutcome) -> RespondToClarificationResult:
    count_respond(r, PendingActionKind.CLARIFICATION)
    if isinstance(r, lc.Responded):
        return ClarificationResponded(
            bundle=ClarificationBundle.of(r.bundle), resumed=r.resumed, queued=r.queued
        )
    return not_responded(r, with_bundle=True)


def answering(principal: Any, what: str, ident: str) -> Authorize:
    """Who may respond: people who may answer the task; to anyone else the action is not found."""

    def authorize(task_id: str, _session_id: str | None) -> None:
        try:
            require_task_answer(principal, task_id)
        except NotFound:
            raise NotFound(what, ident) from None

    return authorize


# --- the agent's wait, for every kind of pending action -----------------------------------------


async def require_asker(info: Info[Context, None], session_id: str) -> None:
    """Only the session's agent (or an admin) asks in it. Unknown and inaccessible sessions get the
    same NotFound; readers of the task get Forbidden."""
    principal = info.context.principal
    if not (principal.role == "agent" and principal.session_id == session_id):
        # The session's own agent is known from its token's row; anyone else needs the session's
        # task to be told NotFound or Forbidden.
        session = await info.context.services.reads.session(session_id)
        require_session_agent(principal, session.id, session.task_id)


@asynccontextmanager
async def live_wait(
    stream: AsyncGenerator[lc.WaitOutcome, None], kind: PendingActionKind
) -> AsyncIterator[AsyncIterator[lc.WaitOutcome]]:
    """An ask's outcomes, counted, with the live-waiter gauge held while the agent waits; the ask is
    closed (a disconnect detaches) when the subscription ends, however it ends."""
    waiting = False
    waiters = metrics.LIVE_WAITERS.labels(kind.value)

    async def counted() -> AsyncGenerator[lc.WaitOutcome, None]:
        nonlocal waiting
        async for outcome in stream:
            count_outcome(outcome, kind)
            if not waiting and isinstance(outcome, lc.Asked):
                waiting = True
                waiters.inc()
            yield outcome

    outcomes = counted()
    try:
        yield outcomes
    finally:
        await outcomes.aclose()
        await stream.aclose()
        if waiting:
            waiters.dec()


async def readable_bundle(
    info: Info[Context, None], pending_id: str, kind: PendingActionKind
) -> lc.Bundle | None:
    """The pending action of this kind the caller may read; None when unknown, unreadable or of the
    other kind (one pending id never answers for both)."""
    principal = info.context.principal
    try:
        bundle = await info.context.services.pending.bundle(
            pending_id, authorize=lambda task_id, _session_id: require_task_read(principal, task_id)
        )
    except NotFound:
        return None
    return bundle if bundle is not None and bundle.kind == kind else None


# --- resolvers ----------------------------------------------------------------------------------


@strawberry.type
class ClarificationQueries:
    @strawberry.field(description="One bundle with its derived state; null when unknown or not readable.")
    async def clarification(
        self, info: Info[Context, None], pending_id: strawberry.ID
    ) -> ClarificationBundle | None:
        bundle = await readable_bundle(info, str(pending_id), PendingActionKind.CLARIFICATION)
        return None if bundle is None else ClarificationBundle.of(bundle)


@strawberry.type
class ClarificationMutations:
    @strawberry.mutation(
        description="Answer (or, with rejected, skip) a clarification bundle; one result per bundle state."
    )
    async def respond_to_clarification(
        self,
        info: Info[Context, None],
        pending_id: strawberry.ID,
        answers: list[ClarificationAnswerInput] = [],  # noqa: B006 - never mutated; renders `= []`
        rejected: bool = False,
    ) -> RespondToClarificationResult:
        result = await info.context.services.pending.respond(
            str(pending_id),
            [
                lc.Answer(str(a.question_id), tuple(str(s) for s in a.selected_option_ids), a.custom_text)
                for a in answers
            ],
            rejected=rejected,
            authorize=answering(info.context.principal, "clarification", str(pending_id)),
            decided_by=info.context.principal.user_id,
        )
        return _respond_result(result)

    @strawberry.mutation(
        description="The agent withdraws a question it still waits on; false when no live waiter owns it."
    )
    async def cancel_clarification(self, info: Info[Context, None], pending_id: strawberry.ID) -> bool:
        principal = info.context.principal

        def authorize(_task_id: str, session_id: str | None) -> None:
            # Only the agent waiting on it (or an admin) withdraws a question; to others it is unknown.
            if session_id is None:
                raise NotFound("clarification", str(pending_id))
            require_session_agent(principal, session_id)

        try:
            return await info.context.services.pending.cancel(str(pending_id), authorize=authorize)
        except NotFound:
            return False

    @strawberry.mutation(description="Move the task's workflow on; refused while any session has a question.")
    async def advance_task(
        self, info: Info[Context, None], task_id: strawberry.ID, to_step: str
    ) -> AdvanceTaskResult:
        principal = info.context.principal
        result = await info.context.services.pending.advance_task(
            str(task_id), to_step, authorize=lambda t, _session_id: require_task_answer(principal, t)
        )
        if isinstance(result, AdvanceBlocked):
            return TaskAdvanceBlocked(
                task_id=strawberry.ID(result.task_id),
                reason=result.reason,
                session_id=None if result.session_id is None else strawberry.ID(result.session_id),
            )
        (task,) = await Task.load(info, [result.task])
        return TaskAdvanced(task=task)


@strawberry.type
class ClarificationSubscriptions:
    @strawberry.subscription(
        description="Ask the session's user (like a tool call): yields ClarificationAsked, then waits for "
        "exactly one of Answered / Rejected / Detached (timeout) / Closed. Disconnecting detaches."
    )
    async def ask_clarification(
        self,
        info: Info[Context, None],
        session_id: strawberry.ID,
        questions: list[ClarificationQuestionInput],
        context: str | None = None,
        timeout_seconds: TimeoutSeconds = None,
    ) -> AsyncGenerator[ClarificationOutcome, None]:
        await require_asker(info, str(session_id))
        stream = info.context.services.pending.ask(
            str(session_id), [_question_dict(q) for q in questions], context, timeout_seconds
        )
        async with live_wait(stream, PendingActionKind.CLARIFICATION) as outcomes:
            async for outcome in outcomes:
                yield _outcome(outcome)
            await stream.aclose()
