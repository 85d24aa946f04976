"""Every undocumented name of the MCP SDK (`mcp`) that the MCP endpoint relies on: here, and nowhere else.

Checked against (`CHECKED`): mcp 1.30.0. The canary (`tests/api/test_mcp_adapter.py`) checks that each
name of `RELIED_ON` still exists with the shape used here, and fails while the installed version
differs from `CHECKED`, naming what to re-check. `TURNWISE_MCP_ADAPTER=0` (`Settings.mcp_adapter`)
turns it off: the SDK's own tool-call handler then answers every call, an unknown tool included, with
a tool result, and the endpoint refuses an unknown tool with a tool error (`isError`) naming the tools
it has.

What it is for: the SDK's tool-call handler turns every exception of a tool into a tool result
(`isError`), the answer to a tool that ran and failed. A call to a tool the server does not have is a
request it cannot serve at all, which the protocol answers with a JSON-RPC error (invalid params), so
an agent that misspelled a tool is told so by its MCP client instead of reading a failed tool's text.

The names, and why there is no public way:

- `mcp.server.lowlevel.Server.request_handlers` (undocumented instance attribute, not underscored): the
  handler of each request type, by the request's class. `Server.call_tool()` registers its handler
  under `types.CallToolRequest` there; the handler here looks at the tool's name first and otherwise
  calls the SDK's, unchanged. The SDK's decorators offer no hook before its handler's `except
  Exception`, and an `McpError` a tool raises becomes a tool result like any other exception.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import McpError

# The library versions the names below were read and checked against.
CHECKED = {"mcp": "1.30.0"}


@dataclass(frozen=True, slots=True)
class Reliance:
    """One name relied on: `owner` ("module:Class"), the attribute, and what it must be (`instance
    attribute`: assigned by the class's `__init__`)."""

    library: str
    owner: str
    name: str
    kind: str


RELIED_ON: tuple[Reliance, ...] = (
    Reliance("mcp", "mcp.server.lowlevel.server:Server", "request_handlers", "instance attribute"),
)


def installed_versions() -> dict[str, str]:
    return {name: version(name) for name in CHECKED}


def unknown_tool(name: str, known: Collection[str]) -> str:
    """What an agent calling a tool this server does not have is told (either way)."""
    return f"unknown tool {name!r}: this server has {', '.join(sorted(known))}"


Handler = Callable[[types.CallToolRequest], Awaitable[types.ServerResult]]


def refuse_unknown_tools(server: Server[Any, Any], known: Collection[str]) -> bool:
    """Answer a call to a tool not in `known` with a JSON-RPC invalid-params error instead of the SDK's
    tool result; `server.call_tool()` must have registered its handler. False, changing nothing, where
    the SDK no longer keeps that handler where it did (the caller then refuses such calls itself)."""
    handlers = getattr(server, "request_handlers", None)
    tool_call = handlers.get(types.CallToolRequest) if isinstance(handlers, dict) else None
    if tool_call is None or not inspect.iscoroutinefunction(tool_call):
        return False

    async def known_tool(request: types.CallToolRequest) -> types.ServerResult:
        name = request.params.name
        if name not in known:
            raise McpError(types.ErrorData(code=types.INVALID_PARAMS, message=unknown_tool(name, known)))
        result: types.ServerResult = await tool_call(request)
        return result

    handlers[types.CallToolRequest] = known_tool  # type: ignore[index]
    return True
