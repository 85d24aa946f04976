"""`approve_tool_use`, Claude Code's permission prompt tool, driven by the official MCP client against
a real server, with the decisions taken over GraphQL as the web app takes them. The text result is
parsed as Claude Code parses it: JSON with `behavior` and `updatedInput` or `message`."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from mcp import ClientSession
from mcp.types import CallToolResult

from tests.api.client import Client
from tests.api.gql import START
from tests.api.kinds import permission_vars
from tests.api.test_mcp import agent_session, mcp_session
from tests.servers import Server

RESPOND = """mutation($p: ID!, $b: PermissionBehavior!, $i: JSON, $m: String, $r: Boolean!, $any: Boolean!) {
  respondToPermission(pendingId: $p, behavior: $b, updatedInput: $i, message: $m, remember: $r,
                      rememberAnyInput: $any) {
    __typename
    ... on PermissionResponded { resumed queued request { state decision { behavior auto } } }
    ... on ClarificationConflict { reason }
    ... on ClarificationDeliveryFailed { retryable message } } }"""
ACTIVE = (
    "query($t: ID!) { taskSessions(taskId: $t) { id activePermission { pendingId state toolName input } } }"
)
RULES = "query($s: ID!) { permissionRules(sessionId: $s) { id toolName input } }"
REVOKE = "mutation($r: ID!) { revokePermissionRule(ruleId: $r) }"
PERMISSION = (
    "query($p: ID!) { permission(pendingId: $p) { state decision { behavior message remember auto } } }"
)
# What Claude Code sends its permission prompt tool.
CALL = {
    "tool_name": "Bash",
    "input": {"command": "alembic upgrade head", "description": "Migrate staging"},
    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
}


def as_claude_code_reads(result: CallToolResult) -> dict[str, Any]:
    """Claude Code takes the first text content of the result and parses it as JSON."""
    assert not result.is_error, result.content
    text = getattr(result.content[0], "text", "")
    verdict = json.loads(text)
    assert verdict["behavior"] in ("allow", "deny")
    return dict(verdict)


async def respond(admin: Client, pending_id: str, behavior: str, **kw: Any) -> dict[str, Any]:
    return dict(
        (await admin.execute(RESPOND, permission_vars(pending_id, behavior, **kw)))["respondToPermission"]
    )


# Everything a call could write, as clients read it.
WRITTEN = """query($t: ID!, $s: ID!) {
  taskSessions(taskId: $t) { state pendingAction pendingActionRevision { epoch sequence }
                             activePermission { pendingId state } }
  sessionMessages(sessionId: $s) { id kind }
  sessionTurns(sessionId: $s) { id } }"""


async def written(admin: Client, task_id: str, session_id: str) -> dict[str, Any]:
    return await admin.execute(WRITTEN, {"t": task_id, "s": session_id})


async def active_permission(admin: Client, task_id: str, state: str = "ACTIVE_LIVE") -> dict[str, Any]:
    for _ in range(400):
        for s in (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]:
            request = s["activePermission"]
            if request and request["state"] == state:
                return dict(request)
        await asyncio.sleep(0.025)
    raise AssertionError(f"no permission request reached {state}")


async def denied_for_now(mcp: ClientSession) -> str:
    """Claude Code's call with no decision in time: denied for now, saying the request stays open
    and naming it. Its pending id."""
    result = await mcp.call_tool("approve_tool_use", {**CALL, "timeout_seconds": 0.2})
    verdict = as_claude_code_reads(result)
    assert verdict["behavior"] == "deny"
    assert "stays open" in verdict["message"]
    assert result.structured_content is not None
    assert result.structured_content["status"] == "detached"
    pending_id = str(result.structured_content["pending_id"])
    assert pending_id in verdict["message"]
    return pending_id


async def decided_while_asking(
    mcp: ClientSession, admin: Client, task_id: str, behavior: str, **kw: Any
) -> tuple[CallToolResult, dict[str, Any]]:
    call = asyncio.create_task(mcp.call_tool("approve_tool_use", CALL))
    request = await active_permission(admin, task_id)
    assert (request["toolName"], request["input"]) == ("Bash", CALL["input"])
    decided = await respond(admin, request["pendingId"], behavior, **kw)
    return await asyncio.wait_for(call, 30), decided


async def test_claude_code_gets_allow_as_asked_edited_and_deny_with_its_reason(
    server: Server, admin: Client
) -> None:
    task_id, _, token = await agent_session(admin, "approvals")
    async with mcp_session(server.base_url, token) as mcp:
        listed = {t.name for t in (await mcp.list_tools()).tools}
        assert "approve_tool_use" in listed
        result, decided = await decided_while_asking(mcp, admin, task_id, "ALLOW")
        assert decided["__typename"] == "PermissionResponded"
        assert as_claude_code_reads(result) == {"behavior": "allow", "updatedInput": CALL["input"]}
        assert result.structured_content is not None
        assert result.structured_content["status"] == "allowed"

        edited = {"command": "alembic upgrade head --sql", "description": "Dry run"}
        result, _ = await decided_while_asking(mcp, admin, task_id, "ALLOW", updated_input=edited)
        assert as_claude_code_reads(result) == {"behavior": "allow", "updatedInput": edited}

        result, _ = await decided_while_asking(mcp, admin, task_id, "DENY", message="Not on staging")
        assert as_claude_code_reads(result) == {"behavior": "deny", "message": "Not on staging"}
        assert result.structured_content is not None
        pending_id = result.structured_content["pending_id"]
        found = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
        assert found["decision"]["behavior"] == "DENY"


async def test_a_permission_is_no_clarification_and_a_question_no_permission(
    server: Server, admin: Client
) -> None:
    task_id, _, token = await agent_session(admin, "one kind each")
    async with mcp_session(server.base_url, token) as mcp:
        call = asyncio.create_task(mcp.call_tool("approve_tool_use", CALL))
        pending_id = (await active_permission(admin, task_id))["pendingId"]
        as_question = await admin.execute(
            "query($p: ID!) { clarification(pendingId: $p) { state } }", {"p": pending_id}
        )
        assert as_question == {"clarification": None}
        assert (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["decision"] is None
        await respond(admin, pending_id, "DENY")
        await asyncio.wait_for(call, 30)
        asked = await mcp.call_tool(
            "ask_user_question",
            {
                "questions": [{"question": "Which?", "options": [{"label": "A"}, {"label": "B"}]}],
                "timeout_seconds": 0.2,
            },
        )
        assert asked.structured_content is not None
        question_id = asked.structured_content["pending_id"]
        assert (await admin.execute(PERMISSION, {"p": question_id})) == {"permission": None}


async def test_bad_decisions_are_refused_by_field_and_change_nothing(server: Server, admin: Client) -> None:
    task_id, _, token = await agent_session(admin, "bad decisions")
    async with mcp_session(server.base_url, token) as mcp:
        call = asyncio.create_task(mcp.call_tool("approve_tool_use", CALL))
        request = await active_permission(admin, task_id)
        pending_id = request["pendingId"]
        for kw, field in (
            ({"updated_input": "rm -rf /"}, "updatedInput"),
            ({"message": "a reason for an allow"}, "message"),
        ):
            with pytest.raises(Exception, match=field):
                await respond(admin, pending_id, "ALLOW", **kw)
        with pytest.raises(Exception, match="remember"):
            await respond(admin, pending_id, "DENY", remember=True)
        assert (await active_permission(admin, task_id))["pendingId"] == pending_id
        await respond(admin, pending_id, "DENY")
        assert as_claude_code_reads(await asyncio.wait_for(call, 30))["behavior"] == "deny"
        refused = await mcp.call_tool("approve_tool_use", {**CALL, "tool": "Bash"})
        assert refused.is_error
        assert "tool" in getattr(refused.content[0], "text", "")


@pytest.mark.scenario("S15")
async def test_no_decision_in_time_denies_for_now_and_a_late_allow_reaches_the_agent_once(
    server: Server, admin: Client
) -> None:
    task_id, session_id, token = await agent_session(admin, "late allow")
    async with mcp_session(server.base_url, token) as mcp:
        pending_id = await denied_for_now(mcp)
        request = await active_permission(admin, task_id, "ACTIVE_DETACHED")
        assert request["pendingId"] == pending_id
    late = await respond(admin, pending_id, "ALLOW")
    assert late["__typename"] == "PermissionResponded"
    assert late["queued"] is True  # no agent holds the prompt channel: it waits in the inbox
    async with mcp_session(server.base_url, token) as mcp:
        first = await mcp.call_tool("wait_for_answer", {"pending_id": pending_id})
        assert as_claude_code_reads(first) == {"behavior": "allow", "updatedInput": CALL["input"]}
        second = await mcp.call_tool("wait_for_answer", {"pending_id": pending_id})
        assert second.structured_content is not None
        assert second.structured_content["status"] == "delivered"
    # A stale decision: newer work superseded a detached request; the person's ALLOW is refused, it
    # writes nothing, and nothing of it reaches the agent.
    async with mcp_session(server.base_url, token) as mcp:
        stale_id = await denied_for_now(mcp)
    await admin.execute(START, {"s": session_id})
    before = await written(admin, task_id, session_id)
    conflict = await respond(admin, stale_id, "ALLOW")
    assert conflict == {"__typename": "ClarificationConflict", "reason": "SUPERSEDED"}
    assert await written(admin, task_id, session_id) == before
    stale = (await admin.execute(PERMISSION, {"p": stale_id}))["permission"]
    assert stale == {"state": "SUPERSEDED_HISTORY", "decision": None}
    async with mcp_session(server.base_url, token) as mcp:
        asked_again = await mcp.call_tool("wait_for_answer", {"pending_id": stale_id})
    assert as_claude_code_reads(asked_again)["behavior"] == "deny"
    assert asked_again.structured_content is not None
    assert asked_again.structured_content["status"] == "closed"


async def test_always_allow_decides_the_next_matching_call_at_once_until_revoked(
    server: Server, admin: Client
) -> None:
    task_id, session_id, token = await agent_session(admin, "always allow")
    async with mcp_session(server.base_url, token) as mcp:
        _, decided = await decided_while_asking(mcp, admin, task_id, "ALLOW", remember=True)
        assert decided["request"]["decision"] == {"behavior": "ALLOW", "auto": False}
        (rule,) = (await admin.execute(RULES, {"s": session_id}))["permissionRules"]
        assert (rule["toolName"], rule["input"]) == ("Bash", CALL["input"])
        again = await asyncio.wait_for(mcp.call_tool("approve_tool_use", CALL), 30)
        assert as_claude_code_reads(again) == {"behavior": "allow", "updatedInput": CALL["input"]}
        assert again.structured_content is not None
        assert again.structured_content["auto"] is True
        found = (await admin.execute(PERMISSION, {"p": again.structured_content["pending_id"]}))["permission"]
        assert found["decision"]["auto"] is True  # in the session's history, naming no person
        assert (await admin.execute(REVOKE, {"r": rule["id"]}))["revokePermissionRule"] is True
        assert (await admin.execute(RULES, {"s": session_id}))["permissionRules"] == []
        result, _ = await decided_while_asking(mcp, admin, task_id, "DENY")
        assert as_claude_code_reads(result)["behavior"] == "deny"


MISSING = object()  # an argument left out
BAD_CALLS = [
    ({"tool_name": ""}, "tool_name"),
    ({"tool_name": " "}, "tool_name"),
    ({"tool_name": 7}, "tool_name"),
    ({"tool_name": "Bash\nrm -rf /"}, "tool_name"),
    ({"tool_name": None}, "tool_name"),
    ({"input": MISSING}, "input"),
    ({"input": {"command": "x" * 64_001}}, "input"),
    # A tool takes its arguments by name; Claude Code reads an allowed input back as an object.
    ({"input": None}, "input"),
    ({"input": "rm -rf /"}, "input"),
    ({"input": 7}, "input"),
    ({"input": ["rm", "-rf", "/"]}, "input"),
    ({"tool_use_id": ""}, "tool_use_id"),
    ({"tool_use_id": "t" * 201}, "tool_use_id"),
    ({"tool_use_id": 7}, "tool_use_id"),
    ({"tool_use_id": "toolu_1\ntoolu_2"}, "tool_use_id"),
    ({"context": "c" * 4001}, "context"),
    ({"context": 7}, "context"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_CALLS, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_CALLS)])
async def test_a_bad_call_is_a_tool_error_naming_the_field_and_writes_nothing(
    server: Server, admin: Client, bad: dict[str, Any], field: str
) -> None:
    task_id, session_id, token = await agent_session(admin, f"bad call {field} {uuid.uuid4().hex[:8]}")
    before = await written(admin, task_id, session_id)
    arguments = {k: v for k, v in {**CALL, **bad}.items() if v is not MISSING}
    async with mcp_session(server.base_url, token) as mcp:
        # Bounded: a refusal comes at once, and a call taken for valid would wait for a decision.
        result = await asyncio.wait_for(mcp.call_tool("approve_tool_use", arguments), 10)
    assert result.is_error, result
    text = str(getattr(result.content[0], "text", ""))
    assert text.startswith(f"{field}:"), text
    assert await written(admin, task_id, session_id) == before


async def test_waiting_again_on_an_open_request_never_asks_anew_even_when_a_rule_now_allows_it(
    server: Server, admin: Client
) -> None:
    task_id, session_id, token = await agent_session(admin, "wait again")
    async with mcp_session(server.base_url, token) as mcp:
        pending_id = await denied_for_now(mcp)
        # Meanwhile the same call, asked again as another tool use, is always-allowed.
        again = {**CALL, "tool_use_id": "toolu_other"}
        call = asyncio.create_task(mcp.call_tool("approve_tool_use", again))
        other = await active_permission(admin, task_id)
        assert other["pendingId"] != pending_id
        await respond(admin, other["pendingId"], "ALLOW", remember=True)
        assert as_claude_code_reads(await asyncio.wait_for(call, 30))["behavior"] == "allow"
        assert len((await admin.execute(RULES, {"s": session_id}))["permissionRules"]) == 1
        before = await written(admin, task_id, session_id)
        # Waiting on the open request waits on it: no new request, nor a rule's decision of one.
        waited = await mcp.call_tool("wait_for_answer", {"pending_id": pending_id, "timeout_seconds": 0.3})
        assert waited.structured_content is not None
        assert (waited.structured_content["status"], waited.structured_content["pending_id"]) == (
            "detached",
            pending_id,
        )
        after = await written(admin, task_id, session_id)
        assert after["sessionMessages"] == before["sessionMessages"]
        request = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
        assert request["state"] == "ACTIVE_DETACHED"
        # And the person's decision on it reaches the agent waiting again.
        waiting = asyncio.create_task(mcp.call_tool("wait_for_answer", {"pending_id": pending_id}))
        live = await active_permission(admin, task_id)
        assert live["pendingId"] == pending_id
        decided = await respond(admin, pending_id, "ALLOW")
        assert decided["__typename"] == "PermissionResponded"
        result = await asyncio.wait_for(waiting, 30)
    assert as_claude_code_reads(result) == {"behavior": "allow", "updatedInput": CALL["input"]}
    assert result.structured_content is not None
    assert result.structured_content["pending_id"] == pending_id
    assert "auto" not in result.structured_content
