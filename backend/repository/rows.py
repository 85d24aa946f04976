"""Row -> record conversion and metadata decoding shared by the repository modules."""

from __future__ import annotations

import json
from typing import Any

from backend.domain.errors import CorruptData
from backend.domain.records import SessionRecord, TaskRecord, TurnRecord


def metadata_of(value: Any, *, where: str) -> dict[str, Any]:
    """Metadata as a dict; anything else stored there is corrupt, never silently emptied."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise CorruptData(f"{where}: metadata is not JSON") from exc
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CorruptData(f"{where}: metadata is not an object")
    return value


def task(row: Any) -> TaskRecord:
    m = row._mapping
    return TaskRecord(
        m["id"], m["title"], m["workflow_step"], m["created_at"], m["updated_at"], m.get("project")
    )


def session(row: Any) -> SessionRecord:
    m = row._mapping
    return SessionRecord(
        m["id"],
        m["task_id"],
        m["state"],
        bool(m["is_primary"]),
        bool(m["input_capable"]),
        int(m["pending_seq"]),
        m["created_at"],
        m["updated_at"],
    )


def turn(row: Any) -> TurnRecord:
    m = row._mapping
    return TurnRecord(
        m["id"],
        m["session_id"],
        m["started_at"],
        m["completed_at"],
        m["created_at"],
        metadata_of(m["metadata"], where=f"turn {m['id']}"),
    )
