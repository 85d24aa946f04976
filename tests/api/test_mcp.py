"""`/mcp` with the official MCP client (ClientSession over Streamable HTTP) against a real server."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult

from backend.api.mcp import tools as mcp_tools
from backend.api.mcp_arguments import ToolArguments
from backend.domain.errors import InvalidInput
from tests.api.client import Client
from tests.api.gql import GRANT, MESSAGES, START, running_session, token_for
from tests.dialects import fresh_db
from tests.servers import ADMIN_TOKEN, Server

RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!, $r: Boolean!) {
  respondToClarification(pendingId: $p, answers: $a, rejected: $r) {
    __typename
    ... on ClarificationResponded { resumed queued }
    ... on ClarificationDeliveryFailed { retryable message } } }"""
ACTIVE = "query($t: ID!) { taskSessions(taskId: $t) { id activeClarification { pendingId state } } }"
CLARIFICATION = "query($p: ID!) { clarification(pendingId: $p) { state } }"
TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id } }"
ACK = "mutation($t: ID!) { acknowledgePrompt(turnId: $t, accepted: true) }"
AGENT_PROMPTS = "subscription($s: ID!) { agentPrompts(sessionId: $s) { turnId generation prompt } }"
QUESTION = {
    "question": "Which database should we use?",
    "header": "Database",
    "options": [
        {"label": "SQLite", "description": "One file"},
        {"label": "PostgreSQL", "description": "A server"},
    ],
}
OTHER = {
    "question": "Which cache should we use?",
    "header": "Cache",
    "options": [{"label": "Redis"}, {"label": "None"}],
}
PICK_POSTGRES = [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"], "customText": "with backups"}]


@asynccontextmanager
async def mcp_session(base_url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def agent_session(admin: Client, name: str) -> tuple[str, str, str]:
    task_id, session_id = await running_session(admin, title=name)
    _, token = await token_for(admin, "agent", name=name, session_id=session_id)
    return task_id, session_id, token


async def wait_for_state(admin: Client, task_id: str, state: str) -> str:
    for _ in range(400):
        for s in (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]:
            bundle = s["activeClarification"]
            if bundle and bundle["state"] == state:
                return str(bundle["pendingId"])
        await asyncio.sleep(0.025)
    raise AssertionError(f"no question reached {state}")


async def respond(
    admin: Client, pending_id: str, answers: list[dict[str, Any]], *, rejected: bool = False
) -> Any:
    data = await admin.execute(RESPOND, {"p": pending_id, "a": answers, "r": rejected})
    return data["respondToClarification"]


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    text = getattr(result.content[0], "text", "")
    return str(text)


async def message_count(admin: Client, session_id: str) -> int:
    return len((await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"])


async def ask_detached(mcp: ClientSession) -> str:
    detached = structured(
        await mcp.call_tool("ask_user_question", {"questions": [QUESTION], "timeout_seconds": 0.2})
    )
    assert detached["status"] == "detached"
    assert detached["answers"] == []
    return str(detached["pending_id"])


async def queued_answer(server: Server, admin: Client, token: str) -> str:
    """A question that detaches at once, answered meanwhile: the answer is queued for the agent."""
    async with mcp_session(server.base_url, token) as mcp:
        pending_id = await ask_detached(mcp)
    assert (await respond(admin, pending_id, PICK_POSTGRES))["queued"] is True
    return pending_id


async def wait_for_answer(mcp: ClientSession, pending_id: str) -> dict[str, Any]:
    return structured(await mcp.call_tool("wait_for_answer", {"pending_id": pending_id}))


async def collect_twice(base_url: str, token: str, pending_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``wait_for_answer`` twice in one new MCP session: the first and the second result."""
    async with mcp_session(base_url, token) as mcp:
        return await wait_for_answer(mcp, pending_id), await wait_for_answer(mcp, pending_id)


def closed(pending_id: str) -> dict[str, Any]:
    """A tool result for a question a newer turn superseded: history, it takes no answer."""
    return {"status": "closed", "pending_id": pending_id, "answers": []}


async def answer_to_resume(admin: Client, pending_id: str) -> None:
    """Answer a detached question: the agent resumes with it in a newer turn."""
    assert (await respond(admin, pending_id, PICK_POSTGRES))["__typename"] == "ClarificationResponded"


def initialize(client_name: str) -> dict[str, Any]:
    """A plain JSON-RPC ``initialize`` request at protocol 2025-06-18."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": client_name, "version": "1"},
        },
    }


async def first_prompt_is_a_fresh_answer(server: Server, admin: Client, token: str, session_id: str) -> bool:
    """Hold agentPrompts, then answer a new detached question: queued items come before anything
    else, so the first prompt being this new answer proves no older item was handed out."""
    fresh = {**QUESTION, "question": "And which cache?"}
    async with mcp_session(server.base_url, token) as mcp:
        detached = structured(
            await mcp.call_tool("ask_user_question", {"questions": [fresh], "timeout_seconds": 0.1})
        )
    agent = Client(server.base_url, token)
    try:
        async with agent.subscribe(AGENT_PROMPTS, {"s": session_id}) as prompts:
            answering = asyncio.create_task(
                respond(
                    admin,
                    str(detached["pending_id"]),
                    [{"questionId": "q1", "selectedOptionIds": ["q1_opt1"]}],
                )
            )
            prompt = (await prompts.next(timeout=30))["agentPrompts"]
            await agent.execute(ACK, {"t": prompt["turnId"]})
            await answering
    finally:
        await agent.aclose()
    return "And which cache?" in prompt["prompt"] and "SQLite" in prompt["prompt"]


async def test_a_live_answer_given_in_graphql_reaches_the_tool_result(server: Server, admin: Client) -> None:
    task_id, _, token = await agent_session(admin, "mcp live")
    async with mcp_session(server.base_url, token) as mcp:
        tools = {t.name for t in (await mcp.list_tools()).tools}
        assert tools == {"ask_user_question", "approve_tool_use", "wait_for_answer"}
        call = asyncio.create_task(mcp.call_tool("ask_user_question", {"questions": [QUESTION]}))
        pending_id = await wait_for_state(admin, task_id, "ACTIVE_LIVE")
        answered = await respond(admin, pending_id, PICK_POSTGRES)
        assert answered["__typename"] == "ClarificationResponded"
        assert answered["queued"] is False
        result = await asyncio.wait_for(call, 30)
    assert structured(result) == {
        "status": "answered",
        "pending_id": pending_id,
        "answers": [
            {
                "question": QUESTION["question"],
                "header": "Database",
                "selected": ["PostgreSQL"],
                "custom_text": "with backups",
            }
        ],
    }
    assert "Continue" in getattr(result.content[0], "text", "")


async def test_a_late_answer_is_queued_and_wait_for_answer_returns_it_exactly_once(
    server: Server, admin: Client
) -> None:
    _, _, token = await agent_session(admin, "mcp late")
    async with mcp_session(server.base_url, token) as mcp:
        pending_id = await ask_detached(mcp)
        result = await mcp.call_tool("ask_user_question", {"questions": [QUESTION], "timeout_seconds": 0.1})
        assert structured(result)["pending_id"] == pending_id, "identical questions reuse the bundle"
    late = await respond(admin, pending_id, PICK_POSTGRES)
    assert late["__typename"] == "ClarificationResponded"
    assert (late["resumed"], late["queued"]) == (False, True)
    first, again = await collect_twice(server.base_url, token, pending_id)
    assert first["status"] == "answered"
    assert first["answers"][0]["selected"] == ["PostgreSQL"]
    assert first["answers"][0]["custom_text"] == "with backups"
    assert again == {"status": "delivered", "pending_id": pending_id, "answers": []}


async def test_wait_for_answer_waits_live_again_while_the_question_is_open(
    server: Server, admin: Client
) -> None:
    task_id, _, token = await agent_session(admin, "mcp rewait")
    async with mcp_session(server.base_url, token) as mcp:
        pending_id = await ask_detached(mcp)
        call = asyncio.create_task(mcp.call_tool("wait_for_answer", {"pending_id": pending_id}))
        assert await wait_for_state(admin, task_id, "ACTIVE_LIVE") == pending_id
        answered = await respond(admin, pending_id, PICK_POSTGRES)
        assert answered["queued"] is False
        result = structured(await asyncio.wait_for(call, 30))
    assert result["status"] == "answered"
    assert result["answers"][0]["selected"] == ["PostgreSQL"]


async def test_skip_gives_rejected(server: Server, admin: Client) -> None:
    task_id, _, token = await agent_session(admin, "mcp skip")
    async with mcp_session(server.base_url, token) as mcp:
        call = asyncio.create_task(mcp.call_tool("ask_user_question", {"questions": [QUESTION]}))
        pending_id = await wait_for_state(admin, task_id, "ACTIVE_LIVE")
        assert (await respond(admin, pending_id, [], rejected=True))["__typename"] == "ClarificationResponded"
        result = structured(await asyncio.wait_for(call, 30))
        # The skip is final: collecting it later reports it as rejected again, with no answers.
        later = await wait_for_answer(mcp, pending_id)
    assert result == {"status": "rejected", "pending_id": pending_id, "answers": []}
    assert later == result


async def test_a_newer_turn_closes_a_queued_answer_and_it_is_never_delivered(
    server: Server, admin: Client
) -> None:
    _, session_id, token = await agent_session(admin, "mcp superseded")
    pending_id = await queued_answer(server, admin, token)
    await admin.execute(START, {"s": session_id})
    async with mcp_session(server.base_url, token) as mcp:
        result = await wait_for_answer(mcp, pending_id)
    assert result == closed(pending_id)
    # Nor through agentPrompts: the stale item is not handed out; a fresh dispatch is the first prompt.
    assert await first_prompt_is_a_fresh_answer(server, admin, token, session_id)


async def test_agent_prompts_delivers_a_queued_answer_first_and_only_once(
    server: Server, admin: Client
) -> None:
    _, session_id, token = await agent_session(admin, "mcp inbox prompts")
    pending_id = await queued_answer(server, admin, token)
    agent = Client(server.base_url, token)
    try:
        async with agent.subscribe(AGENT_PROMPTS, {"s": session_id}) as prompts:
            prompt = (await prompts.next())["agentPrompts"]
        assert "PostgreSQL" in prompt["prompt"]
        assert prompt["generation"] == prompt["turnId"]
    finally:
        await agent.aclose()
    assert await first_prompt_is_a_fresh_answer(server, admin, token, session_id)
    async with mcp_session(server.base_url, token) as mcp:
        again = await wait_for_answer(mcp, pending_id)
    assert again["status"] == "delivered"


BAD_INPUT = [
    ({"questions": [QUESTION] * 5}, "questions"),
    ({"questions": [{**QUESTION, "options": []}]}, "questions[0].options"),
    ({"questions": [{**QUESTION, "header": "Thirteen char"}]}, "questions[0].header"),
    # Refused by the service, which says `title`: the tool says `header`.
    ({"questions": [{**QUESTION, "header": "Data\nbase"}]}, "questions[0].header"),
    ({"questions": [QUESTION], "session_id": "no-such-session"}, "session_id"),
    ({"questions": [{**QUESTION, "question": "Which\x00one?"}]}, "questions[0].question"),
    ({"questions": [QUESTION], "timeout_seconds": 0}, "timeout_seconds"),
    ({"questions": [QUESTION], "timeout_seconds": None}, "timeout_seconds"),
    ({"questions": [QUESTION], "timeout_seconds": "30"}, "timeout_seconds"),
    ({"questions": [QUESTION], "timeout": 30}, "timeout"),
    ({"questions": [{**QUESTION, "multiselect": True}]}, "questions[0].multiselect"),
    (
        {"questions": [{**QUESTION, "options": [{"label": "SQLite", "value": 1}, {"label": "PostgreSQL"}]}]},
        "questions[0].options[0].value",
    ),
    (
        {"questions": [{**QUESTION, "options": [{"label": "SQLite"}, {"label": "sqlite "}]}]},
        "questions[0].options[1].label",
    ),
]


@pytest.mark.parametrize(("arguments", "field"), BAD_INPUT, ids=[f for _, f in BAD_INPUT])
async def test_bad_input_is_a_tool_error_naming_the_field_and_writes_nothing(
    server: Server, admin: Client, arguments: dict[str, Any], field: str
) -> None:
    task_id, session_id, token = await agent_session(admin, f"mcp bad {field} {uuid.uuid4().hex[:8]}")
    before = await message_count(admin, session_id)
    async with mcp_session(server.base_url, token) as mcp:
        # Bounded: a refusal comes at once, and an argument taken for valid would wait for an answer.
        text = error_text(await asyncio.wait_for(mcp.call_tool("ask_user_question", arguments), 10))
    assert text.startswith(f"{field}:"), text
    assert await message_count(admin, session_id) == before
    active = (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]
    assert [s["activeClarification"] for s in active] == [None]


WAIT_BAD_INPUT = [
    ({"timeout_seconds": None}, "timeout_seconds"),
    ({"timeout_seconds": [1]}, "timeout_seconds"),
    ({"session_id": "s"}, "session_id"),
]


@pytest.mark.parametrize(("extra", "field"), WAIT_BAD_INPUT, ids=[f"{f}={e}" for e, f in WAIT_BAD_INPUT])
async def test_wait_for_answer_refuses_bad_input_naming_the_field(
    server: Server, admin: Client, extra: dict[str, Any], field: str
) -> None:
    _, _, token = await agent_session(admin, f"mcp wait bad {field} {uuid.uuid4().hex[:8]}")
    async with mcp_session(server.base_url, token) as mcp:
        pending_id = await ask_detached(mcp)
        call = mcp.call_tool("wait_for_answer", {"pending_id": pending_id, **extra})
        text = error_text(await asyncio.wait_for(call, 10))
    assert text.startswith(f"{field}:"), text


async def test_the_tools_state_the_default_wait_and_take_no_other_arguments(
    server: Server, admin: Client
) -> None:
    _, _, token = await agent_session(admin, "mcp schema")
    async with mcp_session(server.base_url, token) as mcp:
        tools = {t.name: t.input_schema for t in (await mcp.list_tools()).tools}
    for schema in tools.values():
        assert schema["additionalProperties"] is False
        timeout = schema["properties"]["timeout_seconds"]
        assert timeout["type"] == "number"
        assert "7200" in timeout["description"], timeout
    assert tools["approve_tool_use"]["properties"]["input"]["type"] == "object"
    question = tools["ask_user_question"]["properties"]["questions"]["items"]
    assert question["additionalProperties"] is False
    assert question["properties"]["options"]["items"]["additionalProperties"] is False


# An argument is named as the agent spelled it; an unknown one with the field it most likely meant
# (another case style, the GraphQL API's name, a close spelling), else with the fields taken.
SPELLINGS = [
    (
        "ask_user_question",
        {"questions": [QUESTION], "timeoutSeconds": 5},
        "timeoutSeconds: unknown field; did you mean timeout_seconds?",
    ),
    (
        "ask_user_question",
        {"questions": [{**QUESTION, "title": "Database"}]},
        "questions[0].title: unknown field; did you mean header?",
    ),
    (
        "ask_user_question",
        {"questions": [{"prompt": "Which database?", "options": QUESTION["options"]}]},
        "questions[0].prompt: unknown field; did you mean question?",
    ),
    (
        "ask_user_question",
        {"questions": [QUESTION], "prompt": "Which database?"},
        "prompt: unknown field; ask_user_question takes questions, session_id, context, timeout_seconds",
    ),
    (
        "approve_tool_use",
        {"tool_name": "Bash", "input": {"command": "ls"}, "toolUseId": "toolu_1"},
        "toolUseId: unknown field; did you mean tool_use_id?",
    ),
    (
        "approve_tool_use",
        {"tool_name": "Bash", "input": {"timeoutSeconds": "\x00"}},
        "input.timeoutSeconds: text must not contain NUL characters or unpaired surrogates",
    ),
    ("wait_for_answer", {"pendingId": "p1"}, "pendingId: unknown field; did you mean pending_id?"),
]


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"), SPELLINGS, ids=[e.split(":")[0] for *_, e in SPELLINGS]
)
async def test_a_refusal_names_the_argument_as_the_agent_spelled_it_and_the_one_it_meant(
    server: Server, admin: Client, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    _, session_id, token = await agent_session(admin, f"mcp spelling {uuid.uuid4().hex[:8]}")
    before = await message_count(admin, session_id)
    async with mcp_session(server.base_url, token) as mcp:
        text = error_text(await asyncio.wait_for(mcp.call_tool(tool, arguments), 10))
    assert text == expected
    assert await message_count(admin, session_id) == before


# The least each tool takes, and a value of each JSON type (none of which is another's).
VALID_CALLS: dict[str, dict[str, Any]] = {
    "ask_user_question": {"questions": [QUESTION]},
    "approve_tool_use": {"tool_name": "Bash", "input": {"command": "ls"}},
    "wait_for_answer": {"pending_id": "p1"},
}
OF_TYPE = {"string": "x", "number": 7.5, "boolean": True, "object": {"a": 1}, "array": [1], "null": None}


Path = tuple[str | int, ...]


def declared_fields(schema: dict[str, Any], value: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every typed field a tool declares, down through the arguments a valid call holds."""
    if "type" in schema and path:
        yield path, schema
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            yield from declared_fields(sub, value.get(key), (*path, key))
    elif isinstance(value, list) and value:
        yield from declared_fields(schema.get("items", {}), value[0], (*path, 0))


def with_value(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = with_value(value[head] if isinstance(head, int) or head in value else {}, tuple(rest), new)
    return copy


def spelled(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def test_every_declared_field_refuses_a_value_of_a_type_it_does_not_declare() -> None:
    declared = {t.name: t for t in mcp_tools(60)}
    assert set(declared) == set(VALID_CALLS)
    arguments = ToolArguments(declared.values())
    checked = 0
    for name, valid in VALID_CALLS.items():
        arguments.check(name, valid)
        for path, schema in declared_fields(declared[name].input_schema, valid, ()):
            types = {schema["type"]} if isinstance(schema["type"], str) else set(schema["type"])
            for kind, wrong in OF_TYPE.items():
                if kind in types or (kind == "number" and "integer" in types):
                    continue
                with pytest.raises(InvalidInput) as refused:
                    arguments.check(name, with_value(valid, path, wrong))
                assert refused.value.field == spelled(path), (name, path, kind)
                checked += 1
    assert checked > 50, checked


def test_a_field_declared_in_a_schema_is_checked_without_code_of_its_own() -> None:
    declared = mcp_tools(60)
    for tool in declared:
        schema = tool.input_schema
        schema["properties"] = {**schema["properties"], "priority": {"type": "integer", "minimum": 1}}
    arguments = ToolArguments(declared)
    for name, valid in VALID_CALLS.items():
        arguments.check(name, {**valid, "priority": 2})
        for wrong in ("high", 0, 1.5, None):
            with pytest.raises(InvalidInput) as refused:
                arguments.check(name, {**valid, "priority": wrong})
            assert str(refused.value) == "priority: must be a whole number of at least 1"


def test_optional_text_may_be_null_as_if_left_out() -> None:
    arguments = ToolArguments(mcp_tools(60))
    question = {**QUESTION, "header": None, "options": [{"label": "A", "description": None}, {"label": "B"}]}
    arguments.check("ask_user_question", {"questions": [question], "session_id": None, "context": None})
    arguments.check(
        "approve_tool_use", {**VALID_CALLS["approve_tool_use"], "tool_use_id": None, "context": None}
    )
    for name, valid in VALID_CALLS.items():
        with pytest.raises(InvalidInput, match=r"^timeout_seconds: "):
            arguments.check(name, {**valid, "timeout_seconds": None})


async def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(server: Server, admin: Client) -> None:
    _, session_id, token = await agent_session(admin, "mcp unknown tool")
    before = await message_count(admin, session_id)
    async with mcp_session(server.base_url, token) as mcp:
        with pytest.raises(MCPError) as raised:
            await mcp.call_tool("ask_the_user", {"questions": [QUESTION]})
    assert raised.value.error.code == INVALID_PARAMS
    assert "ask_the_user" in raised.value.error.message
    assert await message_count(admin, session_id) == before


async def test_server_info_names_turnwise_and_its_own_version(server: Server, admin: Client) -> None:
    _, _, token = await agent_session(admin, "mcp server info")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as http:
        hello = _sse_json(await http.post("/mcp", json=initialize("t")))
    assert hello["result"]["serverInfo"]["name"] == "turnwise"
    assert hello["result"]["serverInfo"]["version"] == metadata.version("turnwise")
    assert metadata.version("turnwise") != metadata.version("mcp")


async def test_an_ask_that_a_newer_turn_superseded_while_it_waited_ends_closed(
    server: Server, admin: Client
) -> None:
    task_id, _, token = await agent_session(admin, "mcp superseded while waiting")
    async with mcp_session(server.base_url, token) as mcp:
        older = await ask_detached(mcp)
        call = asyncio.create_task(mcp.call_tool("ask_user_question", {"questions": [OTHER]}))
        newer = await wait_for_state(admin, task_id, "ACTIVE_LIVE")
        # Answering the older question resumes the agent in a newer turn: the question it still
        # waits on is history now and takes no answer, so the call says closed, not detached.
        await answer_to_resume(admin, older)
        result = structured(await asyncio.wait_for(call, 30))
        later = await wait_for_answer(mcp, newer)
    assert result == closed(newer)
    assert later == result
    assert (await admin.execute(CLARIFICATION, {"p": newer}))["clarification"][
        "state"
    ] == "SUPERSEDED_HISTORY"


async def test_wait_for_answer_on_a_question_a_newer_turn_superseded_meanwhile_ends_closed(
    server: Server, admin: Client
) -> None:
    task_id, _, token = await agent_session(admin, "mcp superseded while rewaiting")
    async with mcp_session(server.base_url, token) as mcp:
        older = await ask_detached(mcp)
        newer = structured(
            await mcp.call_tool("ask_user_question", {"questions": [OTHER], "timeout_seconds": 0.1})
        )["pending_id"]
        call = asyncio.create_task(mcp.call_tool("wait_for_answer", {"pending_id": newer}))
        assert await wait_for_state(admin, task_id, "ACTIVE_LIVE") == newer
        await answer_to_resume(admin, older)
        result = structured(await asyncio.wait_for(call, 30))
    assert result == closed(newer)


async def test_no_token_is_http_401_and_a_foreign_sessions_token_writes_nothing(
    server: Server, admin: Client
) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{server.base_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert response.status_code == 401
        bad = await http.post(
            f"{server.base_url}/mcp", json={}, headers={"Authorization": "Bearer not-a-token"}
        )
        assert bad.status_code == 401
    _, mine, token = await agent_session(admin, "mcp mine")
    _, other, _ = await agent_session(admin, "mcp other")
    before = await message_count(admin, other)
    async with mcp_session(server.base_url, token) as mcp:
        text = error_text(
            await mcp.call_tool("ask_user_question", {"questions": [QUESTION], "session_id": other})
        )
        pending_id = await ask_detached(mcp)
    assert text.startswith("session_id:")
    assert await message_count(admin, other) == before
    # Another session's agent cannot collect this session's answer either.
    _, _, other_token = await agent_session(admin, "mcp third")
    async with mcp_session(server.base_url, other_token) as mcp:
        denied = error_text(await mcp.call_tool("wait_for_answer", {"pending_id": pending_id}))
    assert denied.startswith("pending_id:")
    assert mine != other, "two distinct sessions"


async def test_an_admin_token_asks_in_the_session_it_names(server: Server, admin: Client) -> None:
    task_id, session_id = await running_session(admin, title="mcp admin")
    async with mcp_session(server.base_url, ADMIN_TOKEN) as mcp:
        missing = error_text(await mcp.call_tool("ask_user_question", {"questions": [QUESTION]}))
        assert missing.startswith("session_id:")
        result = structured(
            await mcp.call_tool(
                "ask_user_question",
                {"questions": [QUESTION], "session_id": session_id, "timeout_seconds": 0.1},
            )
        )
    assert result["status"] == "detached"
    assert await wait_for_state(admin, task_id, "ACTIVE_DETACHED") == result["pending_id"]


@pytest.fixture(params=["sqlite", "postgresql"])
def own_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database for servers of the test's own, to kill."""
    with fresh_db(request.param, request) as url:
        yield url


@pytest.fixture
def own_server(own_database: str) -> Iterator[Server]:
    srv = Server(own_database).start()
    try:
        yield srv
    finally:
        srv.stop()


async def test_a_crash_between_queueing_and_delivery_loses_nothing_and_delivers_once(
    own_server: Server,
) -> None:
    srv = own_server
    admin = Client(srv.base_url, ADMIN_TOKEN)
    try:
        _, _, token = await agent_session(admin, "mcp crash")
        pending_id = await queued_answer(srv, admin, token)
    finally:
        await admin.aclose()
    srv.kill()
    srv.start()
    first, again = await collect_twice(srv.base_url, token, pending_id)
    assert first["status"] == "answered"
    assert first["answers"][0]["selected"] == ["PostgreSQL"]
    assert again["status"] == "delivered"


async def test_a_dropped_connection_detaches_the_question(server: Server, admin: Client) -> None:
    task_id, _, token = await agent_session(admin, "mcp dropped")

    async def ask_and_hang() -> None:
        async with mcp_session(server.base_url, token) as mcp:
            await mcp.call_tool("ask_user_question", {"questions": [QUESTION]})

    call = asyncio.create_task(ask_and_hang())
    pending_id = await wait_for_state(admin, task_id, "ACTIVE_LIVE")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await wait_for_state(admin, task_id, "ACTIVE_DETACHED") == pending_id


def _sse_json(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a Streamable HTTP response (an SSE event or a JSON body)."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return dict(response.json())
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    assert data, response.text
    return dict(json.loads(data[-1]))


async def test_a_client_speaking_the_2025_06_18_protocol_asks_with_plain_json_rpc(
    server: Server, admin: Client
) -> None:
    _, _, token = await agent_session(admin, "mcp 2025-06")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "ask_user_question",
            "arguments": {"questions": [QUESTION], "timeout_seconds": 0.1},
        },
    }
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as http:
        hello = _sse_json(await http.post("/mcp", json=initialize("plain")))
        assert hello["result"]["protocolVersion"] == "2025-06-18"
        done = _sse_json(await http.post("/mcp", json=call))
    assert done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["status"] == "detached"


async def test_a_user_token_may_read_the_task_but_not_ask_in_its_session(
    server: Server, admin: Client
) -> None:
    task_id, session_id = await running_session(admin, title="mcp user")
    user_id, token = await token_for(admin, "user", name="mcp-user")
    await admin.execute(GRANT, {"u": user_id, "t": task_id})
    before = await message_count(admin, session_id)
    async with mcp_session(server.base_url, token) as mcp:
        text = error_text(
            await mcp.call_tool("ask_user_question", {"questions": [QUESTION], "session_id": session_id})
        )
    assert text.startswith("session_id:")
    assert await message_count(admin, session_id) == before
