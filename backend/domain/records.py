"""Plain immutable records that the repository returns and the services and API consume."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TaskRecord:
    id: str
    title: str
    workflow_step: str
    created_at: dt.datetime
    updated_at: dt.datetime
    project: str | None = None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    task_id: str
    state: str
    is_primary: bool
    input_capable: bool
    pending_seq: int
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class TurnRecord:
    id: str
    session_id: str
    started_at: dt.datetime
    completed_at: dt.datetime | None
    created_at: dt.datetime
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MessageRecord:
    id: str
    session_id: str
    turn_id: str
    type: str
    author: str
    content: str
    metadata: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Revision:
    """Decimal epoch (database generation) and sequence (per-session write counter)."""

    epoch: int
    sequence: int

    def key(self) -> tuple[int, int]:
        return (self.epoch, self.sequence)


@dataclass(frozen=True, slots=True)
class SessionPending:
    session_id: str
    task_id: str
    state: str
    current_turn_id: str | None
    pending_action: str | None
    revision: Revision


@dataclass(frozen=True, slots=True)
class SummaryRecord:
    task_id: str
    revision: int
    pending_action: str | None
    fields: dict[str, Any]
    updated_at: dt.datetime
