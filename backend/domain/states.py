"""Session states, message kinds, clarification statuses and the pending-action kinds."""

from __future__ import annotations

import enum


class SessionState(enum.StrEnum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    WAITING_FOR_INPUT = "WAITING_FOR_INPUT"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_SESSION_STATES: frozenset[str] = frozenset(
    {SessionState.COMPLETED, SessionState.FAILED, SessionState.CANCELLED}
)
# Only sessions doing work count towards a task's pending action (kandev-notes, "SQL behaviour").
TASK_PENDING_SESSION_STATES: frozenset[str] = frozenset(
    {SessionState.RUNNING, SessionState.WAITING_FOR_INPUT}
)


class PendingActionKind(enum.StrEnum):
    CLARIFICATION = "clarification"
    PERMISSION = "permission"


class ClarificationStatus(enum.StrEnum):
    PENDING = "pending"
    ANSWERED = "answered"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


TERMINAL_CLARIFICATION_STATUSES: frozenset[str] = frozenset(
    {
        ClarificationStatus.ANSWERED,
        ClarificationStatus.REJECTED,
        ClarificationStatus.CANCELLED,
        ClarificationStatus.EXPIRED,
    }
)

MESSAGE_KIND_MESSAGE = "message"
MESSAGE_KIND_CLARIFICATION = "clarification_request"
MESSAGE_KIND_PERMISSION = "permission_request"
# The message type of each kind of pending action's rows.
MESSAGE_TYPES: dict[PendingActionKind, str] = {
    PendingActionKind.CLARIFICATION: MESSAGE_KIND_CLARIFICATION,
    PendingActionKind.PERMISSION: MESSAGE_KIND_PERMISSION,
}

AUTHORS: frozenset[str] = frozenset({"agent", "user", "system"})

# Every value that a tolerant metadata flag reader treats as set, after casting the JSON value to text.
TRUTHY_FLAG_TEXTS: tuple[str, ...] = ("true", "1")
