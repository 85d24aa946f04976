"""The canary of `backend/api/mcp_adapter.py`: every undocumented name of the MCP SDK that the endpoint
relies on is still there, and the installed SDK is the version it was checked against; and with the
adapter off (`TURNWISE_MCP_ADAPTER=0`) the endpoint still refuses an unknown tool, as a tool error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp import types
from mcp.server.lowlevel import Server as McpServer
from mcp.shared.exceptions import McpError

from backend.api import mcp_adapter as adapter
from backend.api.mcp import TOOL_NAMES
from backend.config import Settings
from tests.api.client import Client
from tests.api.test_mcp import QUESTION, agent_session, error_text, mcp_session, message_count
from tests.api.test_strawberry_adapter import assert_checked_versions, assert_still_there, reliance_id
from tests.dialects import served
from tests.servers import ADMIN_TOKEN, Server

_WHERE = "backend/api/mcp_adapter.py"


def test_the_installed_mcp_sdk_is_the_version_the_names_were_checked_against() -> None:
    assert_checked_versions(adapter, _WHERE, "tests/api/test_mcp.py")


@pytest.mark.parametrize("reliance", adapter.RELIED_ON, ids=reliance_id)
def test_each_relied_on_name_is_still_there(reliance: adapter.Reliance) -> None:
    assert_still_there(reliance, adapter.installed_versions(), _WHERE)


def _server_with_a_tool() -> McpServer[object, object]:
    server: McpServer[object, object] = McpServer("t")

    async def call(name: str, _arguments: dict[str, object]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=name)])

    server.call_tool(validate_input=False)(call)
    return server


async def test_the_sdk_still_keeps_the_tool_call_handler_where_the_adapter_replaces_it() -> None:
    server = _server_with_a_tool()
    assert adapter.refuse_unknown_tools(server, {"known"})
    handler = server.request_handlers[types.CallToolRequest]
    known = types.CallToolRequest(params=types.CallToolRequestParams(name="known", arguments={}))
    result = await handler(known)
    assert isinstance(result.root, types.CallToolResult)
    assert result.root.content[0].text == "known"  # type: ignore[union-attr]
    unknown = types.CallToolRequest(params=types.CallToolRequestParams(name="nope", arguments={}))
    with pytest.raises(McpError) as raised:
        await handler(unknown)
    assert raised.value.error.code == types.INVALID_PARAMS
    assert "'nope'" in raised.value.error.message


def test_where_the_handler_is_gone_the_adapter_changes_nothing() -> None:
    server = _server_with_a_tool()
    del server.request_handlers[types.CallToolRequest]
    assert not adapter.refuse_unknown_tools(server, {"known"})
    assert types.CallToolRequest not in server.request_handlers


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
