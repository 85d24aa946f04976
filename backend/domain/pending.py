"""Task-level pending action: how per-session projections combine into one task indicator."""

from __future__ import annotations

from collections.abc import Iterable

from backend.domain.records import SessionPending
from backend.domain.states import TASK_PENDING_SESSION_STATES, PendingActionKind

# At task level a permission request outranks a clarification (kandev-notes, "SQL behaviour"):
# an agent blocked on a permission cannot make progress at all, a question may already be detached.
TASK_RANK = {PendingActionKind.PERMISSION.value: 2, PendingActionKind.CLARIFICATION.value: 1}


def task_pending_action(projections: Iterable[SessionPending]) -> str | None:
    """Only sessions doing work (running or waiting for input) count towards the task."""
    best: str | None = None
    for p in projections:
        if p.state not in TASK_PENDING_SESSION_STATES or p.pending_action is None:
            continue
        if best is None or TASK_RANK.get(p.pending_action, 0) > TASK_RANK.get(best, 0):
            best = p.pending_action
    return best
