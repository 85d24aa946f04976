"""The access matrix: every operation x every role x own / foreign task, one test per cell, against a
real server. Nobody sees, changes or subscribes to a task it cannot access, and a denial for an
inaccessible id reads exactly like the answer for an id that does not exist. A runner token's own
task is one its hook made (runnerEvent); it then acts as that session's agent and reads nothing
else."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from backend.client import ConnectionRefused
from tests.api.client import Client, GraphQLError
from tests.api.gql import (
    CREATE_SESSION,
    CREATE_TASK,
    CREATE_USER,
    GRANT,
    ISSUE,
    POST,
    PROJECTIONS,
    SESSION_EVENTS,
    START,
    SUMMARIES,
    running_session,
    token_for,
)
from tests.api.kinds import API_PERMISSION, ASK_PERMISSION, BASH
from tests.api.test_clarification_api import ASK, QUESTION
from tests.dialects import served
from tests.hooks.runner import RUNNER_ASK, RUNNER_EVENT, person, runner_event, runner_token
from tests.servers import ADMIN_TOKEN, Server

ROLES = ("admin", "support", "user", "agent", "runner", "none")
# Roles that act as an agent in their own session.
AGENTS = ("agent", "runner")
RULES = "query($s: ID!) { permissionRules(sessionId: $s) { id } }"
REMEMBER = """mutation($p: ID!) {
  respondToPermission(pendingId: $p, behavior: ALLOW, remember: true) { __typename } }"""
SCOPES = ("own", "foreign")


@dataclass
class World:
    """One target task with a session, an open turn and a message; `own` when granted to the caller."""

    task: str
    session: str
    turn: str
    message: str
    user: str  # the user id of the admin-created target user (for grant/token operations)
    pending: str = "none"  # a detached (or, for cancel, live) question or permission request
    rule: str = "none"  # a remembered permission rule of the target session


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def matrix_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The whole matrix runs on both dialects: the access rules are SQL on each."""
    with served(request.param, request) as srv:
        yield srv


@pytest.fixture(scope="module")
async def people(matrix_server: Server) -> dict[str, str]:
    admin = Client(matrix_server.base_url, ADMIN_TOKEN)
    suffix = uuid.uuid4().hex[:6]
    user_id, user_token = await token_for(admin, "user", name=f"user-{suffix}")
    _, support_token = await token_for(admin, "support", name=f"support-{suffix}")
    agent_id = (await admin.execute(CREATE_USER, {"n": f"agent-{suffix}", "r": "agent"}))["createUser"]["id"]
    # The runner's tasks are granted to the person who issued it: someone else than the user above.
    _, owner_token = await person(admin)
    await admin.aclose()
    runner = (await runner_token(matrix_server.base_url, owner_token))["token"]
    return {
        "user_id": user_id,
        "user": user_token,
        "support": support_token,
        "agent_id": agent_id,
        "runner": runner,
    }


async def detached_question(admin: Client, session_id: str) -> str:
    async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.05}) as sub:
        pending_id = str((await sub.next())["askClarification"]["bundle"]["pendingId"])
        assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
    return pending_id


async def remembered_rule(admin: Client, world: World) -> str:
    """The admin always-allows the target's permission request: a rule of its session."""
    decided = await admin.execute(REMEMBER, {"p": world.pending})
    assert decided["respondToPermission"]["__typename"] == "PermissionResponded", decided
    (rule,) = await rules_of(admin, world.session)
    return rule


async def rules_of(admin: Client, session_id: str) -> list[str]:
    return [r["id"] for r in (await admin.execute(RULES, {"s": session_id}))["permissionRules"]]


async def build_world(
    admin: Client, people: dict[str, str], role: str, scope: str, op: str = ""
) -> tuple[World, str | None]:
    """A fresh target and the caller's token (an agent token is bound to the target's session if own;
    a runner's own target is a session its hook made)."""
    if role == "runner" and scope == "own":
        runner = Client(admin.base_url, people["runner"])
        try:
            made = await runner_event(runner, uuid.uuid4().hex, f"/src/{op}", "SESSION_START")
        finally:
            await runner.aclose()
        task_id, session_id = made["taskId"], made["id"]
    else:
        task_id, session_id = await running_session(admin, title=f"{role}-{scope}")
    turn = (await admin.execute(START, {"s": session_id}))["startTurn"]["id"]
    message = (await admin.execute(POST, {"s": session_id, "c": "hello", "k": "message"}))["postMessage"][
        "id"
    ]
    target_user = (await admin.execute(CREATE_USER, {"n": f"t-{uuid.uuid4().hex[:8]}", "r": "user"}))[
        "createUser"
    ]["id"]
    world = World(task_id, session_id, turn, message, target_user)
    if op in NEEDS_DETACHED_QUESTION:
        world.pending = await detached_question(admin, session_id)
    if op in NEEDS_DETACHED_PERMISSION:
        world.pending = await API_PERMISSION.detached(admin, session_id)
    if op in NEEDS_RULE:
        world.rule = await remembered_rule(admin, world)
    token: str | None
    if role == "admin":
        token = ADMIN_TOKEN
    elif role == "none":
        token = None
    elif role == "agent":
        # An agent's session: the target's own session, or another task's session for "foreign".
        if scope == "own":
            bound = session_id
        else:
            other_task = (await admin.execute(CREATE_TASK, {"t": "elsewhere"}))["createTask"]["id"]
            bound = (await admin.execute(CREATE_SESSION, {"task": other_task, "p": True}))["createSession"][
                "id"
            ]
        token = (await admin.execute(ISSUE, {"u": people["agent_id"], "s": bound}))["issueToken"]["token"]
    else:
        token = people[role]
        if role == "user" and scope == "own":
            await admin.execute(GRANT, {"u": people["user_id"], "t": task_id})
    return world, token


# operation -> (kind, document, variables from the world)
OPS: dict[str, tuple[str, str, Any]] = {
    "tasks": ("list", "{ tasks { id } }", lambda _: {}),
    "task": ("nullable", "query($id: ID!) { task(id: $id) { id } }", lambda w: {"id": w.task}),
    "taskSessions": ("read", "query($t: ID!) { taskSessions(taskId: $t) { id } }", lambda w: {"t": w.task}),
    "sessionTurns": (
        "read",
        "query($s: ID!) { sessionTurns(sessionId: $s) { id } }",
        lambda w: {"s": w.session},
    ),
    "sessionMessages": (
        "read",
        "query($s: ID!) { sessionMessages(sessionId: $s) { id } }",
        lambda w: {"s": w.session},
    ),
    "users": ("admin", "{ users { id } }", lambda _: {}),
    "createTask": ("admin", 'mutation { createTask(title: "x") { id } }', lambda _: {}),
    "createSession": (
        "admin",
        "mutation($t: ID!) { createSession(taskId: $t) { id } }",
        lambda w: {"t": w.task},
    ),
    "setSessionState": (
        "admin",
        "mutation($s: ID!) { setSessionState(sessionId: $s, state: WAITING_FOR_INPUT) { id } }",
        lambda w: {"s": w.session},
    ),
    "deleteMessage": (
        "admin",
        "mutation($m: ID!) { deleteMessage(messageId: $m) }",
        lambda w: {"m": w.message},
    ),
    "createUser": ("admin", 'mutation { createUser(name: "n-UNIQUE", role: "user") { id } }', lambda _: {}),
    "issueToken": (
        "admin",
        "mutation($u: ID!) { issueToken(userId: $u) { token } }",
        lambda w: {"u": w.user},
    ),
    "revokeToken": ("admin", 'mutation { revokeToken(tokenId: "no-such-token") }', lambda _: {}),
    "grantTask": (
        "admin",
        "mutation($u: ID!, $t: ID!) { grantTask(userId: $u, taskId: $t) }",
        lambda w: {"u": w.user, "t": w.task},
    ),
    "revokeTask": (
        "admin",
        "mutation($u: ID!, $t: ID!) { revokeTask(userId: $u, taskId: $t) }",
        lambda w: {"u": w.user, "t": w.task},
    ),
    "startTurn": (
        "agent",
        "mutation($s: ID!) { startTurn(sessionId: $s) { id } }",
        lambda w: {"s": w.session},
    ),
    "completeTurn": (
        "agent",
        "mutation($t: ID!) { completeTurn(turnId: $t) { id } }",
        lambda w: {"t": w.turn},
    ),
    "postMessage": (
        "agent",
        'mutation($s: ID!) { postMessage(sessionId: $s, content: "hi") { id } }',
        lambda w: {"s": w.session},
    ),
    "pendingActionChanged": ("subscribe", PROJECTIONS, lambda w: {"t": w.task}),
    "sessionEvents": ("subscribe", SESSION_EVENTS, lambda w: {"s": w.session}),
    "taskSummaryChanged": ("summaries", SUMMARIES, lambda _: {}),
    "clarification": (
        "nullable",
        "query($p: ID!) { clarification(pendingId: $p) { pendingId } }",
        lambda w: {"p": w.pending},
    ),
    "respondToClarification": (
        "answer",
        "mutation($p: ID!) { respondToClarification(pendingId: $p, rejected: true) { __typename } }",
        lambda w: {"p": w.pending},
    ),
    "advanceTask": (
        "answer",
        'mutation($t: ID!) { advanceTask(taskId: $t, toStep: "review") { __typename } }',
        lambda w: {"t": w.task},
    ),
    "cancelClarification": (
        "cancel",
        "mutation($p: ID!) { cancelClarification(pendingId: $p) }",
        lambda w: {"p": w.pending},
    ),
    "askClarification": ("subscribe-agent", ASK, lambda w: {"s": w.session, "q": [QUESTION], "t": 5}),
    "permission": (
        "nullable",
        "query($p: ID!) { permission(pendingId: $p) { pendingId } }",
        lambda w: {"p": w.pending},
    ),
    "activePermission": (
        "active",
        "query($t: ID!) { taskSessions(taskId: $t) { activePermission { pendingId } } }",
        lambda w: {"t": w.task},
    ),
    "permissionRules": ("read", RULES, lambda w: {"s": w.session}),
    "respondToPermission": (
        "answer",
        "mutation($p: ID!) { respondToPermission(pendingId: $p, behavior: DENY) { __typename } }",
        lambda w: {"p": w.pending},
    ),
    # Remembering creates a rule: only people who may answer the task do (the test counts the rules).
    "respondToPermission.remember": ("answer", REMEMBER, lambda w: {"p": w.pending}),
    "revokePermissionRule": (
        "revoke",
        "mutation($r: ID!) { revokePermissionRule(ruleId: $r) }",
        lambda w: {"r": w.rule},
    ),
    "askPermission": (
        "subscribe-agent",
        ASK_PERMISSION,
        lambda w: {"s": w.session, "n": "Bash", "i": BASH, "t": 5},
    ),
    "issueRunnerToken": ("issuer", 'mutation { issueRunnerToken(label: "ci") { id } }', lambda _: {}),
    "runnerEvent": (
        "runner",
        RUNNER_EVENT,
        lambda _: {"c": uuid.uuid4().hex, "p": "/src/matrix", "e": "USER_PROMPT_SUBMIT"},
    ),
    "runnerAskPermission": (
        "subscribe-runner",
        RUNNER_ASK,
        lambda _: {"c": uuid.uuid4().hex, "p": "/src/matrix", "n": "Bash", "i": BASH, "w": 5},
    ),
    "agentPrompts": (
        "hold",
        "subscription($s: ID!) { agentPrompts(sessionId: $s) { turnId } }",
        lambda w: {"s": w.session},
    ),
    "acknowledgePrompt": (
        "agent",
        "mutation($t: ID!) { acknowledgePrompt(turnId: $t, accepted: true) }",
        lambda w: {"t": w.turn},
    ),
}
NEEDS_DETACHED_QUESTION = {"clarification", "respondToClarification"}
NEEDS_DETACHED_PERMISSION = {
    "permission",
    "activePermission",
    "respondToPermission",
    "respondToPermission.remember",
    "revokePermissionRule",
}
NEEDS_RULE = {"revokePermissionRule"}
RULE_WRITES = {"respondToPermission.remember", "revokePermissionRule"}


def can_read(role: str, scope: str) -> bool:
    return role in ("admin", "support") or (role in ("user", *AGENTS) and scope == "own")


def expected(op: str, role: str, scope: str) -> str:
    """'ok', 'hidden' (absent from a list / null), or the error code."""
    kind = OPS[op][0]
    if role == "none":
        return "UNAUTHENTICATED"
    if kind == "issuer":
        # A person with a user of their own (the matrix's admin is the bootstrap token, which has none).
        return "ok" if role == "user" else "FORBIDDEN"
    if kind in ("runner", "subscribe-runner"):
        return "ok" if role == "runner" else "FORBIDDEN"
    if kind in ("list", "nullable", "summaries"):
        return "ok" if can_read(role, scope) else "hidden"
    if kind in ("read", "subscribe", "active"):
        return "ok" if can_read(role, scope) else "NOT_FOUND"
    if kind == "answer":
        if not can_read(role, scope):
            return "NOT_FOUND"
        return "ok" if role in ("admin", "user") else "FORBIDDEN"
    if kind == "cancel":
        # Only the waiting agent (or an admin) withdraws a question; for anyone else it is simply
        # not cancellable: false, with no hint whether it exists.
        return "true" if role == "admin" or (role in AGENTS and scope == "own") else "false"
    if kind == "revoke":
        # People who may answer the task revoke its rules; readers who may not are told so; for
        # anyone else there is no such rule: false, as for an unknown id.
        if not can_read(role, scope):
            return "false"
        return "true" if role in ("admin", "user") else "FORBIDDEN"
    if kind == "admin":
        return "ok" if role == "admin" else "FORBIDDEN"
    # agent operations: the admin, or the agent in its own session; readers are told no, others see nothing
    if role == "admin" or (role in AGENTS and scope == "own"):
        return "ok"
    return "FORBIDDEN" if can_read(role, scope) else "NOT_FOUND"


async def outcome(srv: Server, token: str | None, op: str, world: World) -> tuple[str, str]:
    """(outcome, error message) as the caller experiences it."""
    kind, document, variables = OPS[op]
    client = Client(srv.base_url, token)
    document = document.replace("UNIQUE", uuid.uuid4().hex[:8])
    try:
        if kind in ("subscribe", "summaries", "subscribe-agent", "subscribe-runner", "hold"):
            try:
                async with client.subscribe(document, variables(world)) as sub:
                    seen = []
                    if op == "sessionEvents":
                        # No snapshot here: make changes until an allowed subscriber sees one (it may
                        # attach a moment after the subscribe message); a denied one errors at once.
                        admin = Client(srv.base_url, ADMIN_TOKEN)
                        try:
                            for _ in range(10):
                                await admin.execute(POST, {"s": world.session, "c": "ping", "k": "message"})
                                try:
                                    seen.append(await sub.next(timeout=0.4))
                                    break
                                except TimeoutError:
                                    continue
                        finally:
                            await admin.aclose()
                    # An agent's ask answers at once, with its outcome or its refusal: on a busy
                    # machine that may take a while, and it never stays silent.
                    first = 10.0 if kind in ("subscribe-agent", "subscribe-runner") else 0.4
                    try:
                        while True:
                            seen.append(await sub.next(timeout=first if not seen else 0.4))
                    except TimeoutError:
                        pass
            except GraphQLError as error:
                return str(error.codes[0]), error.errors[0]["message"]
            except ConnectionRefused:  # connection_init refused
                return "UNAUTHENTICATED", ""
            if kind == "summaries":
                listed = {s["taskSummaryChanged"]["taskId"] for s in seen}
                return ("ok" if world.task in listed else "hidden"), ""
            return ("ok" if seen or kind == "hold" else "silent"), ""
        response = await client.raw(document, variables(world))
        if response.status_code == 401:
            return "UNAUTHENTICATED", ""
        body = response.json()
        if body.get("errors"):
            return str(body["errors"][0]["extensions"]["code"]), body["errors"][0]["message"]
        data = body["data"]
        if kind == "list":
            return ("ok" if world.task in {t["id"] for t in data["tasks"]} else "hidden"), ""
        if kind == "nullable":
            return ("ok" if next(iter(data.values())) is not None else "hidden"), ""
        if kind in ("cancel", "revoke"):
            return str(next(iter(data.values()))).lower(), ""
        if kind == "active":
            found = [s["activePermission"] for s in data["taskSessions"] if s["activePermission"]]
            return ("ok" if found else "hidden"), ""
        return "ok", ""
    finally:
        await client.aclose()


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("op", sorted(OPS))
async def test_access_matrix(
    matrix_server: Server, people: dict[str, str], op: str, role: str, scope: str
) -> None:
    admin = Client(matrix_server.base_url, ADMIN_TOKEN)
    try:
        world, token = await build_world(admin, people, role, scope, op)
        if op == "cancelClarification":
            # A question its agent still waits on: the only kind that can be cancelled.
            async with admin.subscribe(ASK, {"s": world.session, "q": [QUESTION], "t": 30}) as waiting:
                world.pending = str((await waiting.next())["askClarification"]["bundle"]["pendingId"])
                got, message = await outcome(matrix_server, token, op, world)
        else:
            got, message = await outcome(matrix_server, token, op, world)
        rules = await rules_of(admin, world.session) if op in RULE_WRITES else []
    finally:
        await admin.aclose()
    assert got == expected(op, role, scope)
    # Rules change only through people who may answer the task: never an agent token, nor a reader.
    if op == "respondToPermission.remember":
        assert len(rules) == (1 if got == "ok" else 0)
    if op == "revokePermissionRule":
        assert rules == ([] if got == "true" else [world.rule])
    if got == "NOT_FOUND":
        # Indistinguishable from absence: the same words an unknown id gets, naming only what was asked.
        t, s, u, m, p = (f"ghost-{uuid.uuid4().hex[:6]}" for _ in range(5))
        ghost = World(task=t, session=s, turn=u, message=m, user=world.user, pending=p)
        ghost_outcome, ghost_message = await outcome(matrix_server, token, op, ghost)
        assert ghost_outcome == "NOT_FOUND"
        for real, fake in zip(
            (world.task, world.session, world.turn, world.message, world.pending),
            (ghost.task, ghost.session, ghost.turn, ghost.message, ghost.pending),
            strict=True,
        ):
            message = message.replace(real, "ID")
            ghost_message = ghost_message.replace(fake, "ID")
        assert message == ghost_message
        assert world.task not in message or op == "taskSessions" or op == "pendingActionChanged"
