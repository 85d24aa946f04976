"""Access rules: who may read, answer, or act as the agent of a task or session.

Every resolver calls one of these before touching data. An error never says whether an
inaccessible id exists: denial and absence raise the same NotFound.
"""

from __future__ import annotations

from backend.api.auth import Principal
from backend.domain.errors import Forbidden, NotFound


def can_read_task(principal: Principal, task_id: str) -> bool:
    if principal.role in ("admin", "support"):
        return True
    return task_id in principal.task_ids


def require_task_read(principal: Principal, task_id: str) -> None:
    if not can_read_task(principal, task_id):
        raise NotFound("task", task_id)


def require_task_answer(principal: Principal, task_id: str) -> None:
    """Answer, skip or cancel a clarification of the task (support staff only read)."""
    require_task_read(principal, task_id)
    if principal.role == "support":
        raise Forbidden("support access is read-only")


def require_session_agent(principal: Principal, session_id: str) -> None:
    """Act as the agent of this session: ask, post, complete turns, receive prompts."""
    if principal.role == "admin":
        return
    if principal.role == "agent" and principal.session_id == session_id:
        return
    raise NotFound("session", session_id)
