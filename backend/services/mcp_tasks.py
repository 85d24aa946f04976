"""MCP tasks: a task-augmented tool call's record, kept in the database so any server process (and a
restarted one) can answer for it. What a task waits on is a pending action; its status is read from
that action each time (`api/mcp_tasks.py`), never stored here. Its result is stored once, when the
action settled, so every later read returns the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.db.engine import utcnow
from backend.domain.ids import new_id
from backend.repository import mcp_tasks as repo
from backend.repository.mcp_tasks import McpTaskRecord
from backend.services.context import Deps
from backend.services.pending.actions import PendingActions
from backend.services.pending.core import Authorize

# The longest a task is kept, whatever its client asks for (its pending action may stay open longer).
MAX_TTL_MS = 7 * 24 * 3600 * 1000


@dataclass
class McpTasks:
    deps: Deps
    pending: PendingActions

    def ttl_ms(self, requested: int | None) -> int:
        """A task's ttl: what its client asked for, but at least the longest wait this server allows
        (a task never expires while its call could still be waiting) and at most `MAX_TTL_MS`."""
        longest = int(self.deps.settings.max_wait_seconds * 1000)
        return max(longest, min(requested or 0, MAX_TTL_MS))

    async def create(
        self,
        *,
        owner: str,
        session_id: str,
        pending_id: str,
        tool: str,
        ttl_ms: int,
        result: dict[str, Any] | None = None,
    ) -> McpTaskRecord:
        """A new task on a pending action (`result`: the call was already decided, by a rule)."""
        async with self.deps.db.write() as conn:
            return await repo.insert(
                conn,
                task_id=new_id(),
                owner=owner,
                session_id=session_id,
                pending_id=pending_id,
                tool=tool,
                ttl_ms=ttl_ms,
                result=result,
            )

    async def get(self, task_id: str, owner: str) -> McpTaskRecord | None:
        """The owner's task, unless it is past its ttl (another owner's reads as none)."""
        async with self.deps.db.read() as conn:
            task = await repo.get(conn, task_id, owner)
        return task if task is not None and task.expires_at > utcnow() else None

    async def list(self, owner: str, *, after: str | None, limit: int) -> list[McpTaskRecord]:
        """The owner's live tasks, oldest first, after the cursor (the id of the last one listed)."""
        async with self.deps.db.read() as conn:
            tasks = await repo.list_for(conn, owner, after=after, limit=limit)
        now = utcnow()
        return [t for t in tasks if t.expires_at > now]

    async def complete(self, task: McpTaskRecord, result: dict[str, Any]) -> McpTaskRecord:
        """The task with its result: `result` if none was stored yet, else the one stored first."""
        async with self.deps.db.write() as conn:
            await repo.complete(conn, task.id, result)
            stored = await repo.get(conn, task.id, task.owner)
        return stored if stored is not None else task

    async def cancel(self, task: McpTaskRecord, authorize: Authorize) -> bool:
        """Cancel the task's pending action while it is open (live or detached): the pending-actions
        service's own cancel, so its card and notifications close as for any cancel."""
        return await self.pending.cancel(task.pending_id, authorize=authorize, detached_too=True)
