"""The client kit: pure-Python client logic shared by CPython and the browser's MicroPython."""

from frontend_py.kit.activation import (
    INERT,
    OPENED_SESSION,
    OPENED_TASK,
    AbortSignal,
    ActivationController,
    Navigator,
    session_route,
    sole_session,
    task_route,
)
from frontend_py.kit.derivation import (
    CLARIFICATION,
    PERMISSION,
    active_pending_ids,
    current_turn,
    is_truthy,
    message_row,
    pending_action,
    session_pending,
    turn_row,
    visible_turns,
)
from frontend_py.kit.lifetimes import Lifetimes
from frontend_py.kit.revision import EpochFloor, is_newer_or_equal, merge
from frontend_py.kit.store import ReadToken, Store
from frontend_py.kit.timestamps import parse_timestamp

__all__ = [
    "CLARIFICATION",
    "INERT",
    "OPENED_SESSION",
    "OPENED_TASK",
    "PERMISSION",
    "AbortSignal",
    "ActivationController",
    "EpochFloor",
    "Lifetimes",
    "Navigator",
    "ReadToken",
    "Store",
    "active_pending_ids",
    "current_turn",
    "is_newer_or_equal",
    "is_truthy",
    "merge",
    "message_row",
    "parse_timestamp",
    "pending_action",
    "session_pending",
    "session_route",
    "sole_session",
    "task_route",
    "turn_row",
    "visible_turns",
]
