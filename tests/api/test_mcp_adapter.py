"""The canary of `backend/api/mcp_adapter.py`: the installed MCP SDK is the version the endpoint was
checked against (it relies on no undocumented name, and on two public ones the SDK marks provisional),
and what those are for still holds; and with the adapter off (`TURNWISE_MCP_ADAPTER=0`) the endpoint
still refuses an unknown tool, as a tool error."""

from __future__ import annotations

from collections.abc import Iterator

import pydantic
import pytest
from mcp.server.lowlevel import Server as McpServer
from mcp.types import methods

from backend.api import mcp_adapter as adapter
from backend.api.mcp import TOOL_NAMES
from backend.config import Settings
from tests.api.client import Client
from tests.api.test_mcp import QUESTION, agent_session, error_text, mcp_session, message_count
from tests.api.test_strawberry_adapter import assert_checked_versions
from tests.dialects import served
from tests.servers import ADMIN_TOKEN, Server

_WHERE = "backend/api/mcp_adapter.py"
TASK = {"taskId": "t", "status": "working", "createdAt": "2026-01-01T00:00:00Z"}


def test_the_installed_mcp_sdk_is_the_version_the_names_were_checked_against() -> None:
    assert_checked_versions(adapter, _WHERE, "tests/api/test_mcp.py and tests/api/test_mcp_tasks.py")
    assert adapter.RELIED_ON == ()


def test_the_sdk_still_refuses_a_task_as_a_2025_tool_call_result_which_the_task_middleware_answers() -> None:
    # Why a 2025-11-25 task-augmented call is answered by a middleware (before the SDK's result check).
    created = {"task": {**TASK, "lastUpdatedAt": TASK["createdAt"], "ttl": 1000}}
    with pytest.raises(pydantic.ValidationError):
        methods.validate_server_result("tools/call", "2025-11-25", created)


def test_the_provisional_public_seams_the_endpoint_uses_are_there() -> None:
    server: McpServer[object] = McpServer("t")
    assert isinstance(server.middleware, list)
    server.add_request_handler("tasks/get", pydantic.BaseModel, lambda _c, _p: None)  # type: ignore[arg-type,return-value]
    assert server.get_request_handler("tasks/get") is not None


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNWISE_MCP_ADAPTER", raising=False)
    assert Settings.from_env().mcp_adapter
    monkeypatch.setenv("TURNWISE_MCP_ADAPTER", "0")
    assert not Settings.from_env().mcp_adapter


@pytest.fixture(scope="module")
def unadapted_server() -> Iterator[Server]:
    with served("sqlite", env={"TURNWISE_MCP_ADAPTER": "0"}) as srv:
        yield srv


async def test_with_the_adapter_off_an_unknown_tool_is_a_tool_error_and_writes_nothing(
    unadapted_server: Server,
) -> None:
    admin = Client(unadapted_server.base_url, ADMIN_TOKEN)
    try:
        _, session_id, token = await agent_session(admin, "mcp unknown tool, adapter off")
        before = await message_count(admin, session_id)
        async with mcp_session(unadapted_server.base_url, token) as mcp:
            refused = error_text(await mcp.call_tool("ask_the_user", {"questions": [QUESTION]}))
            # A known tool is still called, as the SDK calls it.
            missing = error_text(await mcp.call_tool("wait_for_answer", {"pending_id": "nope"}))
        assert refused == adapter.unknown_tool("ask_the_user", TOOL_NAMES)
        assert missing == "pending_id: pending action 'nope' not found"
        assert await message_count(admin, session_id) == before
    finally:
        await admin.aclose()
