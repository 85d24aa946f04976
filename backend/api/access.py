"""Access rules: who may read, answer, or act as the agent of a task or session.

Every resolver calls one of these before touching data. An error never says whether an
inaccessible id exists: denial and absence raise the same NotFound, naming only the id asked for.

Roles: `admin` everything; `support` reads every task, writes nothing; `user` reads and answers
the tasks granted to it; `agent` reads its session's task and acts (ask, post, complete turns,
receive prompts) only in its one session; `runner` (a person's runner token) reads the tasks it made
and acts as the agent only in the sessions it made.
"""

from __future__ import annotations

from backend.api.auth import Principal
from backend.domain.errors import Forbidden, NotFound

READ_ALL_ROLES = ("admin", "support")
# Tokens that stand for an agent, not a person: they have no destinations, inbox or people to list.
AGENT_ROLES = ("agent", "runner")


def can_read_task(principal: Principal, task_id: str) -> bool:
    if principal.role in READ_ALL_ROLES:
        return True
    return task_id in principal.task_ids


def readable_task_ids(principal: Principal) -> frozenset[str] | None:
    """The tasks the principal may list; None means every task."""
    return None if principal.role in READ_ALL_ROLES else principal.task_ids


def require_task_read(principal: Principal, task_id: str) -> None:
    if not can_read_task(principal, task_id):
        raise NotFound("task", task_id)


def require_session_read(principal: Principal, session_id: str, task_id: str) -> None:
    """Read a session (of `task_id`); the error names the session only, never its task."""
    if not can_read_task(principal, task_id):
        raise NotFound("session", session_id)


def require_task_answer(principal: Principal, task_id: str) -> None:
    """Answer, skip or cancel a pending action of the task, or change its session's permission rules
    (support staff and agents only read)."""
    require_task_read(principal, task_id)
    if principal.role not in ("admin", "user"):
        raise Forbidden(f"the {principal.role} role cannot answer questions or decide permission requests")


def require_session_agent(principal: Principal, session_id: str, task_id: str | None = None) -> None:
    """Act as the agent of this session: ask, post, complete turns, receive prompts.

    With `task_id`, a caller who may read the session gets Forbidden; anyone else NotFound.
    """
    if principal.role == "admin":
        return
    if principal.role == "agent" and principal.session_id == session_id:
        return
    if principal.role == "runner" and session_id in principal.session_ids:
        return
    if task_id is not None and can_read_task(principal, task_id):
        raise Forbidden("only the session's agent or an admin may do this")
    raise NotFound("session", session_id)


def require_person(principal: Principal, what: str) -> None:
    """Refuse an agent's or a runner's token what only a person has (`what`: their destinations, ...)."""
    if principal.role in AGENT_ROLES:
        article = "an" if principal.role == "agent" else "a"
        raise Forbidden(f"{article} {principal.role} token has no {what}")


def require_admin(principal: Principal) -> None:
    principal.require_admin()
