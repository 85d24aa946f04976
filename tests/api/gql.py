"""Operations shared by the projection, access and live API tests."""

from __future__ import annotations

from typing import Any

from tests.api.client import Client

CREATE_TASK = "mutation($t: String!) { createTask(title: $t) { id } }"
CREATE_SESSION = """mutation($task: ID!, $p: Boolean!) {
  createSession(taskId: $task, isPrimary: $p) { id } }"""
SET_STATE = """mutation($s: ID!, $st: SessionState!) {
  setSessionState(sessionId: $s, state: $st) { id state } }"""
START = "mutation($s: ID!) { startTurn(sessionId: $s) { id } }"
COMPLETE = "mutation($t: ID!) { completeTurn(turnId: $t) { id } }"
POST = """mutation($s: ID!, $c: String!, $k: String!) { postMessage(sessionId: $s, content: $c, kind: $k) {
  id } }"""
DELETE = "mutation($m: ID!) { deleteMessage(messageId: $m) }"
SESSIONS = """query($task: ID!) { taskSessions(taskId: $task) {
  id pendingAction pendingActionRevision { epoch sequence } } }"""
TASKS = """{ tasks { id summary { taskId revision pendingAction updatedAt }
  sessions { id pendingAction pendingActionRevision { epoch sequence } } } }"""
MESSAGES = "query($s: ID!) { sessionMessages(sessionId: $s) { id kind content turnId } }"
CREATE_USER = "mutation($n: String!, $r: String!) { createUser(name: $n, role: $r) { id } }"
ISSUE = "mutation($u: ID!, $s: ID) { issueToken(userId: $u, sessionId: $s) { id token } }"
GRANT = "mutation($u: ID!, $t: ID!) { grantTask(userId: $u, taskId: $t) }"
REVOKE = "mutation($id: ID!) { revokeToken(tokenId: $id) }"

PROJECTIONS = """subscription($t: ID, $s: ID) { pendingActionChanged(taskId: $t, sessionId: $s) {
  sessionId pendingAction revision { epoch sequence } } }"""
SESSION_EVENTS = """subscription($s: ID!) { sessionEvents(sessionId: $s) {
  kind messageId message { id kind content turnId }
  projection { sessionId pendingAction revision { epoch sequence } } } }"""
SUMMARIES = "subscription { taskSummaryChanged { taskId revision pendingAction updatedAt } }"


async def running_session(admin: Client, *, title: str = "a task") -> tuple[str, str]:
    """A task with one RUNNING primary session that has an open turn."""
    task_id = (await admin.execute(CREATE_TASK, {"t": title}))["createTask"]["id"]
    session_id = (await admin.execute(CREATE_SESSION, {"task": task_id, "p": True}))["createSession"]["id"]
    await admin.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
    await admin.execute(START, {"s": session_id})
    return task_id, session_id


async def token_for(admin: Client, role: str, *, name: str, session_id: str | None = None) -> tuple[str, str]:
    """(user id, plaintext token) of a new user with that role."""
    user_id = (await admin.execute(CREATE_USER, {"n": name, "r": role}))["createUser"]["id"]
    issued = (await admin.execute(ISSUE, {"u": user_id, "s": session_id}))["issueToken"]
    return user_id, issued["token"]


def revision_key(revision: dict[str, Any]) -> tuple[int, int]:
    return int(revision["epoch"]), int(revision["sequence"])
