"""GraphQL object types and enums of the contract, built from repository records."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Sequence
from typing import Annotated, Any, cast

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from backend.api.context import Context
from backend.domain import clarification as cq
from backend.domain.errors import present
from backend.domain.lifecycle import Bundle, BundleRow, ConflictReason
from backend.domain.lifecycle import BundleState as ClarificationBundleState
from backend.domain.permissions import (
    NOT_AN_OBJECT_KEY,
    Decision,
    RuleRef,
    decision_from_response,
    request_of,
    shown_input,
)
from backend.domain.records import (
    MessageRecord,
    Revision,
    SessionPending,
    SessionRecord,
    SummaryRecord,
    TaskRecord,
    TurnRecord,
)
from backend.domain.rule_patterns import PatternError
from backend.domain.rule_scopes import RuleBehavior, Scope
from backend.domain.rule_suggestions import suggest_rules
from backend.domain.states import (
    MESSAGE_KIND_CLARIFICATION,
    ClarificationStatus,
    PendingActionKind,
    SessionState,
)
from backend.services.summaries import TaskView

# The domain's enums are the GraphQL enums: one definition each, registered under the contract's names.
strawberry.enum(PendingActionKind, name="PendingActionKind")
strawberry.enum(SessionState, name="SessionState")
strawberry.enum(ClarificationStatus, name="ClarificationStatus")
strawberry.enum(ClarificationBundleState, name="ClarificationBundleState")
strawberry.enum(ConflictReason, name="ConflictReason")
strawberry.enum(RuleBehavior, name="RuleBehavior")
strawberry.enum(
    Scope,
    name="RuleScope",
    description="Where a permission rule applies: one session, every session of one task, every task "
    "of one project (Task.project), or everywhere (admins only).",
)


@strawberry.enum
class MessageEventKind(enum.Enum):
    ADDED = "added"
    UPDATED = "updated"
    DELETED = "deleted"


_PENDING_KINDS = {k.value: k for k in PendingActionKind}
_SESSION_STATES = {s.value: s for s in SessionState}


def pending_kind(value: str | None) -> PendingActionKind | None:
    # A map lookup first: thousands per task list; an unknown value still raises as the enum does.
    return None if value is None else _PENDING_KINDS.get(value) or PendingActionKind(value)


def session_state(value: str) -> SessionState:
    return _SESSION_STATES.get(value) or SessionState(value)


@strawberry.type
class PendingActionRevision:
    epoch: str
    sequence: str

    @classmethod
    def of(cls, revision: Revision) -> PendingActionRevision:
        return cls(epoch=str(revision.epoch), sequence=str(revision.sequence))


@strawberry.type
class SessionProjection:
    session_id: strawberry.ID
    pending_action: PendingActionKind | None
    revision: PendingActionRevision

    @classmethod
    def of(cls, p: SessionPending) -> SessionProjection:
        return cls(
            session_id=strawberry.ID(p.session_id),
            pending_action=pending_kind(p.pending_action),
            revision=PendingActionRevision.of(p.revision),
        )


@strawberry.type
class TaskStatusSummary:
    task_id: strawberry.ID
    revision: int
    pending_action: PendingActionKind | None
    updated_at: dt.datetime

    @classmethod
    def of(cls, s: SummaryRecord) -> TaskStatusSummary:
        return cls(
            task_id=strawberry.ID(s.task_id),
            revision=s.revision,
            pending_action=pending_kind(s.pending_action),
            updated_at=s.updated_at,
        )


@strawberry.type
class ClarificationOption:
    id: strawberry.ID
    label: str
    description: str | None


@strawberry.type
class ClarificationResponse:
    selected_option_ids: list[strawberry.ID]
    custom_text: str | None


@strawberry.type
class ClarificationQuestion:
    pending_id: strawberry.ID
    question_id: strawberry.ID
    title: str | None
    prompt: str
    options: list[ClarificationOption]
    multi_select: bool
    status: ClarificationStatus
    agent_disconnected: bool
    response: ClarificationResponse | None
    answer_queued: bool = strawberry.field(
        default=False,
        description="Answered while no agent was connected: the answer waits in the session's inbox "
        "until the agent comes back and takes it (exactly once).",
    )

    @classmethod
    def of(cls, q: cq.QuestionView) -> ClarificationQuestion:
        try:
            status = ClarificationStatus(q.status)
        except ValueError:
            status = ClarificationStatus.PENDING
        return cls(
            pending_id=strawberry.ID(q.pending_id),
            question_id=strawberry.ID(q.question_id),
            title=q.title,
            prompt=q.prompt,
            options=[
                ClarificationOption(id=strawberry.ID(o.id), label=o.label, description=o.description)
                for o in q.options
            ],
            multi_select=q.multi_select,
            status=status,
            agent_disconnected=q.agent_disconnected,
            answer_queued=q.answer_queued,
            response=None
            if q.response is None
            else ClarificationResponse(
                selected_option_ids=[strawberry.ID(s) for s in q.response.selected_option_ids],
                custom_text=q.response.custom_text,
            ),
        )


@strawberry.type
class ClarificationBundle:
    pending_id: strawberry.ID
    session_id: strawberry.ID
    task_id: strawberry.ID
    turn_id: strawberry.ID | None
    state: ClarificationBundleState
    context: str | None
    asked_at: dt.datetime = strawberry.field(description="When the agent asked.")
    # The stored rows; their questions are read only when a client selects them (an agent's ask
    # and a respond usually select the bundle's id alone).
    rows: strawberry.Private[tuple[BundleRow, ...]]

    @strawberry.field
    def questions(self) -> list[ClarificationQuestion]:
        views = [cq.question_view(r.metadata) for r in self.rows]
        return [ClarificationQuestion.of(v) for v in views if v is not None]

    @classmethod
    def of(cls, b: Bundle) -> ClarificationBundle:
        return cls(
            pending_id=strawberry.ID(b.pending_id),
            session_id=strawberry.ID(b.session_id),
            task_id=strawberry.ID(b.task_id),
            turn_id=None if b.turn_id is None else strawberry.ID(b.turn_id),
            state=ClarificationBundleState(b.state.value),
            context=b.context,
            asked_at=b.asked_at,
            rows=b.rows,
        )


@strawberry.enum
class PermissionBehavior(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


@strawberry.type(
    description="The rule that decided a request, as it was when it decided: its pattern, behavior and "
    "scope (kept with the decision, so it still reads after the rule is revoked or expired)."
)
class PermissionRuleSnapshot:
    id: strawberry.ID
    tool_name: str
    any_input: bool = strawberry.field(
        description="True: the rule matched any input of the tool (a bare tool name)."
    )
    pattern: str | None = strawberry.field(
        description="Its pattern; null for a decision stored before rules had patterns."
    )
    behavior: RuleBehavior
    scope: Scope
    scope_id: strawberry.ID | None

    @classmethod
    def of(cls, r: RuleRef) -> PermissionRuleSnapshot:
        return cls(
            id=strawberry.ID(r.id),
            tool_name=r.tool_name,
            any_input=r.any_input,
            pattern=r.pattern,
            behavior=RuleBehavior(r.behavior),
            scope=Scope(r.scope),
            scope_id=None if r.scope_id is None else strawberry.ID(r.scope_id),
        )


@strawberry.type(
    description="A rule a person may mean by allowing a request always: this exact call, the command's "
    "prefix, the file's folder, the tool (or its MCP server)."
)
class RuleSuggestion:
    pattern: str
    label: str = strawberry.field(description="What it allows, as a person reads it.")
    broad: bool = strawberry.field(
        description="It lets through any input of a tool that runs commands or writes files: ask once "
        "more before remembering it."
    )
    warning: str | None = strawberry.field(description="With broad: what it lets through.")


@strawberry.type
class PermissionDecision:
    behavior: PermissionBehavior
    updated_input: JSON | None = strawberry.field(
        description="ALLOW: the input the tool must run with (the person may have edited it)."
    )
    message: str | None = strawberry.field(description="DENY: why, shown to the agent.")
    remember: bool = strawberry.field(description="ALLOW: also created a rule for this session.")
    auto: bool = strawberry.field(description="Decided by a remembered rule, without asking anyone.")
    rule_id: strawberry.ID | None = strawberry.field(
        description="With auto: the id of the remembered rule that decided it (it may since have been "
        "revoked); null when a person decided."
    )
    rule: PermissionRuleSnapshot | None = strawberry.field(
        description="With auto: the rule that decided it, as it was then; kept with the decision, so it "
        "still reads after the rule is revoked."
    )

    @classmethod
    def of(cls, d: Decision) -> PermissionDecision:
        return cls(
            behavior=PermissionBehavior(d.behavior),
            updated_input=d.updated_input if d.allowed else None,
            message=d.message,
            remember=d.remember,
            auto=d.auto,
            rule_id=None if d.rule is None else strawberry.ID(d.rule.id),
            rule=None if d.rule is None else PermissionRuleSnapshot.of(d.rule),
        )


@strawberry.type(description="A tool call an agent asked to make, with its derived state.")
class PermissionRequest:
    pending_id: strawberry.ID
    session_id: strawberry.ID
    task_id: strawberry.ID
    turn_id: strawberry.ID | None
    state: ClarificationBundleState
    tool_name: str
    input: JSON = strawberry.field(
        description="The tool's input, a JSON object. A request stored before inputs had to be objects, "
        f'whose input is not one, shows it as {{"{NOT_AN_OBJECT_KEY}": <that input>}}; an ALLOW of it '
        "takes an updatedInput."
    )
    tool_use_id: str | None
    context: str | None
    agent_disconnected: bool
    decision: PermissionDecision | None
    asked_at: dt.datetime = strawberry.field(description="When the agent asked.")

    @strawberry.field(
        description="The rules a person may remember from this request, narrowest first (respondToPermission "
        "with remember and rememberPattern)."
    )
    async def suggestions(self, info: Info[Context, None]) -> list[RuleSuggestion]:
        project = await info.context.project_by_task.load(str(self.task_id))
        try:
            found = suggest_rules(self.tool_name, cast(dict[str, Any], self.input), project=project)
        except PatternError:  # a tool whose name no rule can hold: nothing to suggest
            return []
        return [
            RuleSuggestion(pattern=s.pattern.text, label=s.label, broad=s.broad, warning=s.warning)
            for s in found
        ]

    @classmethod
    def of(cls, b: Bundle) -> PermissionRequest:
        row = b.rows[0]
        request = present(request_of(row.metadata), f"tool request of {b.pending_id}")
        decision = decision_from_response(row.metadata.get("response"))
        tool_use_id = request.get("tool_use_id")
        return cls(
            pending_id=strawberry.ID(b.pending_id),
            session_id=strawberry.ID(b.session_id),
            task_id=strawberry.ID(b.task_id),
            turn_id=None if b.turn_id is None else strawberry.ID(b.turn_id),
            state=ClarificationBundleState(b.state.value),
            tool_name=str(request.get("tool_name") or ""),
            input=cast(JSON, shown_input(request.get("input"))),
            tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
            context=b.context,
            agent_disconnected=row.metadata.get("agent_disconnected") is True,
            decision=None if decision is None else PermissionDecision.of(decision),
            asked_at=b.asked_at,
        )


@strawberry.type
class Turn:
    id: strawberry.ID
    session_id: strawberry.ID
    started_at: dt.datetime
    completed_at: dt.datetime | None
    created_at: dt.datetime
    lifecycle_only: bool

    @classmethod
    def of(cls, t: TurnRecord) -> Turn:
        return cls(
            id=strawberry.ID(t.id),
            session_id=strawberry.ID(t.session_id),
            started_at=t.started_at,
            completed_at=t.completed_at,
            created_at=t.created_at,
            lifecycle_only=cq.flag(t.metadata.get("lifecycle_only")),
        )


@strawberry.type
class Message:
    id: strawberry.ID
    session_id: strawberry.ID
    turn_id: strawberry.ID
    kind: str
    author: str
    content: str
    created_at: dt.datetime
    clarification: ClarificationQuestion | None

    @classmethod
    def of(cls, m: MessageRecord) -> Message:
        view = cq.question_view(m.metadata) if m.type == MESSAGE_KIND_CLARIFICATION else None
        return cls(
            id=strawberry.ID(m.id),
            session_id=strawberry.ID(m.session_id),
            turn_id=strawberry.ID(m.turn_id),
            kind=m.type,
            author=m.author,
            content=m.content,
            created_at=m.created_at,
            clarification=None if view is None else ClarificationQuestion.of(view),
        )


@strawberry.type
class TaskSession:
    """Built with its projection, read in the same statement as the session (or primed for it). Its
    scalar fields are plain values set once here, so a list of thousands resolves them by attribute
    instead of through a resolver call each."""

    record: strawberry.Private[SessionRecord]
    projection: strawberry.Private[SessionPending]
    id: strawberry.ID
    task_id: strawberry.ID
    state: SessionState
    is_primary: bool
    input_capable: bool
    created_at: dt.datetime
    pending_action: PendingActionKind | None
    pending_action_revision: PendingActionRevision

    @classmethod
    def of(cls, record: SessionRecord, projection: SessionPending) -> TaskSession:
        return cls(
            record=record,
            projection=projection,
            id=strawberry.ID(record.id),
            task_id=strawberry.ID(record.task_id),
            state=session_state(record.state),
            is_primary=record.is_primary,
            input_capable=record.input_capable,
            created_at=record.created_at,
            pending_action=pending_kind(projection.pending_action),
            pending_action_revision=PendingActionRevision.of(projection.revision),
        )

    @classmethod
    async def load(cls, info: Info[Context, None], records: Sequence[SessionRecord]) -> list[TaskSession]:
        """Sessions with their projections; the request fails when any projection is missing."""
        projections = await info.context.pending_by_session.load_many([r.id for r in records])
        out = []
        for record, projection in zip(records, projections, strict=True):
            if projection is None:
                raise LookupError(f"no projection for session {record.id}")
            out.append(cls.of(record, projection))
        return out

    @strawberry.field(description="The current-turn active bundle, or null.")
    async def active_clarification(self, info: Info[Context, None]) -> ClarificationBundle | None:
        # Batched per request through the one rule (current turn, pending, live session).
        bundle = await info.context.active_bundle_by_session.load(self.record.id)
        return None if bundle is None else ClarificationBundle.of(bundle)

    @strawberry.field(description="The current-turn active permission request, or null.")
    async def active_permission(self, info: Info[Context, None]) -> PermissionRequest | None:
        bundle = await info.context.active_permission_by_session.load(self.record.id)
        return None if bundle is None else PermissionRequest.of(bundle)


@strawberry.type
class Task:
    """Built from one reconciled view (summary, sessions and their projections read together), so a
    task row and its sessions agree and its fields resolve without further reads."""

    record: strawberry.Private[TaskRecord]
    view: strawberry.Private[TaskView]
    # Plain values set once in `of`: resolved by attribute, not through a resolver call each.
    id: strawberry.ID
    title: str
    workflow_step: str
    project: str | None = strawberry.field(
        description="The repository folder the task works in (a hook's cwd); rules can be scoped to it."
    )
    primary_session_id: strawberry.ID | None
    summary: TaskStatusSummary | None = strawberry.field(
        description="Null tells a client to drop its cached summary."
    )

    @classmethod
    def of(cls, record: TaskRecord, view: TaskView) -> Task:
        primary = next((s.id for s in view.sessions if s.is_primary), None)
        return cls(
            record=record,
            view=view,
            id=strawberry.ID(record.id),
            title=record.title,
            workflow_step=record.workflow_step,
            project=record.project,
            primary_session_id=None if primary is None else strawberry.ID(primary),
            summary=None if view.summary is None else TaskStatusSummary.of(view.summary),
        )

    @classmethod
    async def load(cls, info: Info[Context, None], records: Sequence[TaskRecord]) -> list[Task]:
        """Tasks with their reconciled views; a task that vanished meanwhile is left out."""
        views = await info.context.task_views.load_many([r.id for r in records])
        return [cls.of(r, v) for r, v in zip(records, views, strict=True) if v is not None]

    @strawberry.field(description="Authoritative; the request fails if projection fails.")
    def sessions(self) -> list[Annotated[TaskSession, strawberry.lazy("backend.api.types")]]:
        out = []
        for s in self.view.sessions:
            projection = self.view.projections.get(s.id)
            if projection is None:
                raise LookupError(f"no projection for session {s.id}")
            out.append(TaskSession.of(s, projection))
        return out
