"""The first slice of the contract over real HTTP: tasks, sessions, turns, messages, errors, health."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.client import Client, GraphQLError
from tests.dialects import served
from tests.servers import Server

# The contract holds with every adapter off as well (Strawberry's own executor, extension runner, parse
# cache and error check, the MCP SDK's own tool-call handler: each library's public path).
ADAPTERS_OFF = {"TURNWISE_WS_ADAPTER": "0", "TURNWISE_GRAPHQL_CORE_ADAPTER": "0", "TURNWISE_MCP_ADAPTER": "0"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "sqlite, adapters off"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    dialect, _, off = request.param.partition(", ")
    with served(dialect, request, env=ADAPTERS_OFF if off else None) as srv:
        yield srv


TASK = "mutation($t: String!) { createTask(title: $t) { id title workflowStep primarySessionId } }"
SESSION = """mutation($task: ID!, $p: Boolean!) { createSession(taskId: $task, isPrimary: $p) {
  id taskId state isPrimary inputCapable pendingAction pendingActionRevision { epoch sequence } } }"""
START = """mutation($s: ID!, $l: Boolean!) {
  startTurn(sessionId: $s, lifecycleOnly: $l) { id lifecycleOnly completedAt } }"""
COMPLETE = "mutation($t: ID!) { completeTurn(turnId: $t) { id completedAt } }"
POST = """mutation($s: ID!, $c: String!, $k: String!) {
  postMessage(sessionId: $s, content: $c, kind: $k) { id turnId kind author content createdAt } }"""
STATE = "mutation($s: ID!, $st: SessionState!) { setSessionState(sessionId: $s, state: $st) { id state } }"
SESSIONS = """query($task: ID!) { taskSessions(taskId: $task) {
  id state pendingAction pendingActionRevision { epoch sequence } } }"""
TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id startedAt completedAt lifecycleOnly } }"
MESSAGES = (
    "query($s: ID!, $f: Int, $a: ID) { sessionMessages(sessionId: $s, first: $f, after: $a) { id content } }"
)


async def new_session(admin: Client, *, primary: bool = True) -> tuple[str, str]:
    task = (await admin.execute(TASK, {"t": "a task"}))["createTask"]
    session = (await admin.execute(SESSION, {"task": task["id"], "p": primary}))["createSession"]
    return task["id"], session["id"]


async def snapshot(admin: Client, session_id: str) -> dict[str, Any]:
    turns = (await admin.execute(TURNS, {"s": session_id}))["sessionTurns"]
    messages = (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"]
    return {"turns": turns, "messages": messages}


async def test_request_without_a_valid_token_is_refused(server: Server) -> None:
    for token in (None, "wrong-token"):
        client = Client(server.base_url, token)
        response = await client.raw("{ tasks { id } }")
        await client.aclose()
        assert response.status_code == 401
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


async def test_health_and_readiness(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"


async def test_turns_and_messages_round_trip_with_projection(admin: Client) -> None:
    task_id, session_id = await new_session(admin)
    turn = (await admin.execute(START, {"s": session_id, "l": False}))["startTurn"]
    lifecycle = (await admin.execute(START, {"s": session_id, "l": True}))["startTurn"]
    assert lifecycle["lifecycleOnly"] is True
    posted = (await admin.execute(POST, {"s": session_id, "c": "hello", "k": "message"}))["postMessage"]
    # A lifecycle-only turn never owns new messages: the conversational turn is current.
    assert posted["turnId"] == turn["id"]
    assert posted["createdAt"].endswith("Z")
    assert "." in posted["createdAt"]
    turns = (await admin.execute(TURNS, {"s": session_id}))["sessionTurns"]
    assert [t["id"] for t in turns] == [turn["id"], lifecycle["id"]]
    await admin.execute(POST, {"s": session_id, "c": "may I?", "k": "permission_request"})
    sessions = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]
    assert sessions[0]["pendingAction"] == "PERMISSION"
    task = (
        await admin.execute(
            "query($id: ID!) { task(id: $id) { primarySessionId sessions { id } } }", {"id": task_id}
        )
    )["task"]
    assert task["primarySessionId"] == session_id
    assert task["sessions"] == [{"id": session_id}]


async def test_revision_sequence_advances_with_every_projection_write(admin: Client) -> None:
    task_id, session_id = await new_session(admin)

    async def revision() -> tuple[int, int]:
        rev = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"][0]["pendingActionRevision"]
        return int(rev["epoch"]), int(rev["sequence"])

    seen = [await revision()]
    await admin.execute(START, {"s": session_id, "l": False})
    seen.append(await revision())
    await admin.execute(POST, {"s": session_id, "c": "x", "k": "message"})
    seen.append(await revision())
    assert seen == sorted(seen)
    assert len(set(seen)) == 3


@pytest.mark.scenario("S03")
async def test_deleting_messages_never_moves_ownership_back(admin: Client) -> None:
    task_id, session_id = await new_session(admin)
    await admin.execute(START, {"s": session_id, "l": False})
    perm = (await admin.execute(POST, {"s": session_id, "c": "may I?", "k": "permission_request"}))[
        "postMessage"
    ]
    before = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]
    assert before[0]["pendingAction"] == "PERMISSION", "the request is pending while its turn is current"
    newer = (await admin.execute(START, {"s": session_id, "l": False}))["startTurn"]
    note = (await admin.execute(POST, {"s": session_id, "c": "newer work", "k": "message"}))["postMessage"]
    assert note["turnId"] == newer["id"]
    assert await admin.execute("mutation($m: ID!) { deleteMessage(messageId: $m) }", {"m": note["id"]})
    sessions = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]
    assert sessions[0]["pendingAction"] is None, "the older turn's request must stay inert"
    assert perm["id"] in [m["id"] for m in (await snapshot(admin, session_id))["messages"]]
    # The newer turn, its every message gone, is still the current one: the next message lands in it.
    probe = (await admin.execute(POST, {"s": session_id, "c": "still here", "k": "message"}))["postMessage"]
    assert probe["turnId"] == newer["id"]
    sessions = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]
    assert sessions[0]["pendingAction"] is None


async def test_message_pages_follow_creation_order(admin: Client) -> None:
    _, session_id = await new_session(admin)
    ids = [
        (await admin.execute(POST, {"s": session_id, "c": f"m{i}", "k": "message"}))["postMessage"]["id"]
        for i in range(5)
    ]
    first = (await admin.execute(MESSAGES, {"s": session_id, "f": 2}))["sessionMessages"]
    rest = (await admin.execute(MESSAGES, {"s": session_id, "f": 10, "a": first[-1]["id"]}))[
        "sessionMessages"
    ]
    assert [m["id"] for m in first + rest] == ids


@pytest.mark.parametrize(
    ("query", "variables", "code"),
    [
        (START, {"s": "no-such-session", "l": False}, "NOT_FOUND"),
        (POST, {"s": "no-such-session", "c": "x", "k": "message"}, "NOT_FOUND"),
        (COMPLETE, {"t": "no-such-turn"}, "NOT_FOUND"),
        (SESSION, {"task": "no-such-task", "p": False}, "NOT_FOUND"),
        (TASK, {"t": "   "}, "BAD_USER_INPUT"),
        (MESSAGES, {"s": "no-such-session"}, "NOT_FOUND"),
    ],
)
async def test_unknown_ids_and_bad_input_get_a_clear_error(
    admin: Client, query: str, variables: dict[str, Any], code: str
) -> None:
    with pytest.raises(GraphQLError) as err:
        await admin.execute(query, variables)
    assert err.value.codes == [code]


async def test_completing_a_completed_turn_is_refused_and_changes_nothing(admin: Client) -> None:
    _, session_id = await new_session(admin)
    turn = (await admin.execute(START, {"s": session_id, "l": False}))["startTurn"]
    await admin.execute(COMPLETE, {"t": turn["id"]})
    before = await snapshot(admin, session_id)
    with pytest.raises(GraphQLError) as err:
        await admin.execute(COMPLETE, {"t": turn["id"]})
    assert err.value.codes == ["INVALID_STATE"]
    assert await snapshot(admin, session_id) == before


async def test_a_terminal_session_takes_no_messages_or_turns(admin: Client) -> None:
    _, session_id = await new_session(admin)
    await admin.execute(START, {"s": session_id, "l": False})
    await admin.execute(STATE, {"s": session_id, "st": "COMPLETED"})
    before = await snapshot(admin, session_id)
    for query, variables in (
        (POST, {"s": session_id, "c": "late", "k": "message"}),
        (START, {"s": session_id, "l": False}),
        (STATE, {"s": session_id, "st": "RUNNING"}),
    ):
        with pytest.raises(GraphQLError) as err:
            await admin.execute(query, variables)
        assert err.value.codes == ["INVALID_STATE"]
    assert await snapshot(admin, session_id) == before


async def test_unknown_message_kind_and_author_are_refused(admin: Client) -> None:
    _, session_id = await new_session(admin)
    with pytest.raises(GraphQLError) as err:
        await admin.execute(POST, {"s": session_id, "c": "x", "k": "clarification_request"})
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert (await snapshot(admin, session_id))["messages"] == []
