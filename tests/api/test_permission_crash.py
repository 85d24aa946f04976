"""A late ALLOW for Claude Code's `approve_tool_use`, with the server killed right after the decision was
queued in the session's inbox (no agent held the prompt channel), then restarted on the same
database: the decision is kept (never restored, never lost) and `wait_for_answer` hands it over
exactly once. The clarification counterpart is in tests/api/test_mcp.py; a kill at each step of a
dispatched resume is in tests/api/test_resume_crash.py, for both kinds."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from backend.faults import CRASH_EXIT_CODE
from tests.api.client import Client
from tests.api.test_mcp import agent_session, mcp_session
from tests.api.test_mcp_approvals import CALL, PERMISSION, as_claude_code_reads, respond
from tests.dialects import fresh_db
from tests.servers import ADMIN_TOKEN, Server

TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id } }"


@pytest.fixture(params=["sqlite", "postgresql"])
def own_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database for servers of the test's own, to kill."""
    with fresh_db(request.param, request) as url:
        yield url


async def test_a_crash_right_after_a_late_allow_is_queued_still_delivers_it_once_after_restart(
    own_database: str,
) -> None:
    crashing = Server(own_database, env={"TURNWISE_FAULT_POINTS": "inbox.after_queue"}).start()
    try:
        admin = Client(crashing.base_url, ADMIN_TOKEN)
        try:
            _, session_id, token = await agent_session(admin, "permission crash after queue")
            async with mcp_session(crashing.base_url, token) as mcp:
                detached = await mcp.call_tool("approve_tool_use", {**CALL, "timeout_seconds": 0.2})
                assert as_claude_code_reads(detached)["behavior"] == "deny"  # denied for now
                assert detached.structuredContent is not None
                assert detached.structuredContent["status"] == "detached"
                pending_id = str(detached.structuredContent["pending_id"])
            with pytest.raises(httpx.HTTPError):
                await respond(admin, pending_id, "ALLOW")  # the process dies under the request
        finally:
            await admin.aclose()
        assert crashing.proc is not None
        assert crashing.proc.wait(timeout=10) == CRASH_EXIT_CODE, crashing.log()
    finally:
        crashing.kill()
    with Server(own_database) as srv:
        admin = Client(srv.base_url, ADMIN_TOKEN)
        try:
            found = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
            assert found["state"] == "TERMINAL", "the decision was kept, not restored"
            assert found["decision"]["behavior"] == "ALLOW"
            async with mcp_session(srv.base_url, token) as mcp:
                first = await mcp.call_tool("wait_for_answer", {"pending_id": pending_id})
                second = await mcp.call_tool("wait_for_answer", {"pending_id": pending_id})
            # The successor's start event was replayed at startup: it is the current, visible turn.
            turns = (await admin.execute(TURNS, {"s": session_id}))["sessionTurns"]
            again = await respond(admin, pending_id, "ALLOW")
        finally:
            await admin.aclose()
    assert as_claude_code_reads(first) == {"behavior": "allow", "updatedInput": CALL["input"]}
    assert second.structuredContent is not None
    assert second.structuredContent["status"] == "delivered"
    assert len(turns) == 2
    assert again == {"__typename": "ClarificationConflict", "reason": "TERMINAL"}
