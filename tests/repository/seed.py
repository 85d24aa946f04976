"""Raw rows for repository tests: exactly what is stored, including data the API would refuse."""

from __future__ import annotations

import datetime as dt
from typing import Any

from backend.db.engine import Database, utcnow
from backend.db.tables import task_session_messages, task_session_turns, task_sessions, tasks
from backend.repository import message_fields


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.UTC)


async def seed_session(
    db: Database, case: dict[str, Any], *, session_id: str = "s1", task_id: str = "task1"
) -> None:
    now = utcnow()
    async with db.write() as conn:
        await conn.execute(tasks.insert().values(id=task_id, title="t", created_at=now, updated_at=now))
        await conn.execute(
            task_sessions.insert().values(
                id=session_id,
                task_id=task_id,
                state=case.get("session_state", "RUNNING"),
                is_primary=True,
                input_capable=True,
                created_at=now,
                updated_at=now,
            )
        )
        for t in case.get("turns", []):
            await conn.execute(
                task_session_turns.insert().values(
                    id=t["id"],
                    session_id=session_id,
                    started_at=instant(t["started_at"]),
                    created_at=instant(t["created_at"]),
                    completed_at=None if t["completed_at"] is None else instant(t["completed_at"]),
                    metadata=t.get("metadata", {}),
                )
            )
        for m in case.get("messages", []):
            await conn.execute(
                task_session_messages.insert().values(
                    id=m["id"],
                    session_id=session_id,
                    turn_id=m["turn_id"],
                    type=m["type"],
                    author="agent",
                    content="",
                    **message_fields.values_of(m.get("metadata", {})),
                    created_at=now,
                    updated_at=now,
                )
            )
