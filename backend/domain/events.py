"""The kinds of change a committed write announces on the task channel (their wire values)."""

from __future__ import annotations

import enum


class EventKind(enum.StrEnum):
    MESSAGE_ADDED = "message.added"
    MESSAGE_UPDATED = "message.updated"
    MESSAGE_DELETED = "message.deleted"
    SESSION_STATE = "session.state"
    TURN_STARTED = "turn.started"
    TURN_COMPLETED = "turn.completed"
