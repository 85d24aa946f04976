"""A late answer for an MCP agent (a question's answer for `ask_user_question`, an ALLOW for Claude Code's
`approve_tool_use`), with the server killed right after it was queued in the session's inbox (no
agent held the prompt channel), then restarted on the same database: the answer is kept (never
restored, never lost), `wait_for_answer` hands it over exactly once, and a second answer is a
conflict. A kill at each step of a dispatched resume is in tests/api/test_resume_crash.py, for both
kinds; a kill between queueing and delivery in tests/api/test_mcp.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.types import CallToolResult

from backend.faults import CRASH_EXIT_CODE
from tests.api import test_clarification_api as graphql_questions
from tests.api import test_mcp_approvals as approvals
from tests.api.client import Client
from tests.api.test_mcp import (
    CLARIFICATION,
    PICK_POSTGRES,
    TURNS,
    agent_session,
    ask_detached,
    mcp_session,
    structured,
)
from tests.dialects import fresh_db
from tests.servers import ADMIN_TOKEN, Server

KINDS = ["clarification", "permission"]


@pytest.fixture(params=["sqlite", "postgresql"])
def own_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database for servers of the test's own, to kill."""
    with fresh_db(request.param, request) as url:
        yield url


async def ask_and_detach(kind: str, mcp: ClientSession) -> str:
    """The agent asks and its wait runs out: the request stays open. Its pending id."""
    if kind == "clarification":
        return await ask_detached(mcp)
    return await approvals.denied_for_now(mcp)


async def answer(kind: str, admin: Client, pending_id: str) -> dict[str, Any]:
    """A person answers (PostgreSQL, with backups) or allows as asked; the mutation's result."""
    if kind == "clarification":
        return dict(await graphql_questions.respond(admin, pending_id, PICK_POSTGRES))
    return await approvals.respond(admin, pending_id, "ALLOW")


async def kept(kind: str, admin: Client, pending_id: str) -> None:
    """The answer was kept, not restored: the request is terminal, holding it."""
    if kind == "clarification":
        seen = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert seen["state"] == "TERMINAL", "the answer was kept, not restored"
        return
    found = (await admin.execute(approvals.PERMISSION, {"p": pending_id}))["permission"]
    assert found["state"] == "TERMINAL", "the decision was kept, not restored"
    assert found["decision"]["behavior"] == "ALLOW"


def received(kind: str, first: CallToolResult) -> None:
    """What the agent's first `wait_for_answer` handed over: the answer, or the ALLOW as asked."""
    if kind == "clarification":
        collected = structured(first)
        assert collected["status"] == "answered"
        assert collected["answers"][0]["custom_text"] == "with backups"
        return
    assert approvals.as_claude_code_reads(first) == {
        "behavior": "allow",
        "updatedInput": approvals.CALL["input"],
    }


@pytest.mark.parametrize("kind", KINDS)
async def test_a_crash_right_after_the_queue_commit_still_delivers_once_after_restart(
    own_database: str, kind: str
) -> None:
    crashing = Server(own_database, env={"TURNWISE_FAULT_POINTS": "inbox.after_queue"}).start()
    try:
        admin = Client(crashing.base_url, ADMIN_TOKEN)
        try:
            _, session_id, token = await agent_session(admin, f"mcp {kind} crash after queue")
            async with mcp_session(crashing.base_url, token) as mcp:
                pending_id = await ask_and_detach(kind, mcp)
            with pytest.raises(httpx.HTTPError):
                await answer(kind, admin, pending_id)  # the process dies under the request
        finally:
            await admin.aclose()
        assert crashing.proc is not None
        assert crashing.proc.wait(timeout=10) == CRASH_EXIT_CODE, crashing.log()
    finally:
        crashing.kill()
    with Server(own_database) as srv:
        admin = Client(srv.base_url, ADMIN_TOKEN)
        try:
            await kept(kind, admin, pending_id)
            async with mcp_session(srv.base_url, token) as mcp:
                first = await mcp.call_tool("wait_for_answer", {"pending_id": pending_id})
                second = await mcp.call_tool("wait_for_answer", {"pending_id": pending_id})
            # The successor's start event was replayed at startup: it is the current, visible turn.
            turns = (await admin.execute(TURNS, {"s": session_id}))["sessionTurns"]
            again = await answer(kind, admin, pending_id)
        finally:
            await admin.aclose()
    received(kind, first)
    assert structured(second)["status"] == "delivered"
    assert len(turns) == 2
    assert (again["__typename"], again["reason"]) == ("ClarificationConflict", "TERMINAL")
