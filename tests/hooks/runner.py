"""Runner tokens over GraphQL, as the hook tests drive them: issue one, report hook events."""

from __future__ import annotations

import uuid
from typing import Any

from tests.api.client import Client
from tests.api.gql import CREATE_USER, ISSUE

ISSUE_RUNNER = "mutation($l: String!) { issueRunnerToken(label: $l) { id userId token } }"
RUNNER_EVENT = """mutation($c: String!, $p: String!, $e: RunnerEvent!) {
  runnerEvent(clientSessionId: $c, project: $p, event: $e) { id taskId state isPrimary } }"""
RUNNER_ASK = """subscription($c: String!, $p: String!, $n: String!, $i: JSON!, $w: Float) {
  runnerAskPermission(clientSessionId: $c, project: $p, toolName: $n, input: $i, waitSeconds: $w) {
    __typename
    ... on PermissionAsked { request { pendingId sessionId taskId } }
    ... on PermissionDecided { pendingId decision { behavior updatedInput message auto } }
    ... on PermissionClosed { pendingId }
  } }"""
TASK = "query($id: ID!) { task(id: $id) { id title project primarySessionId } }"


async def person(admin: Client, *, role: str = "user") -> tuple[str, str]:
    """(user id, token) of a new person."""
    name = f"{role}-{uuid.uuid4().hex[:8]}"
    user_id = (await admin.execute(CREATE_USER, {"n": name, "r": role}))["createUser"]["id"]
    token = (await admin.execute(ISSUE, {"u": user_id, "s": None}))["issueToken"]["token"]
    return user_id, token


async def runner_token(base_url: str, person_token: str, label: str = "laptop") -> dict[str, Any]:
    """A runner token the person issues: {id, userId, token}."""
    client = Client(base_url, person_token)
    try:
        return dict((await client.execute(ISSUE_RUNNER, {"l": label}))["issueRunnerToken"])
    finally:
        await client.aclose()


async def runner_event(runner: Client, client_session_id: str, project: str, event: str) -> dict[str, Any]:
    data = await runner.execute(RUNNER_EVENT, {"c": client_session_id, "p": project, "e": event})
    return dict(data["runnerEvent"])
