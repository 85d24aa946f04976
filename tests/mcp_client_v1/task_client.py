"""One MCP task operation through the official 1.x Python SDK's client (its experimental tasks API, the
2025-11-25 wire), in a process of its own: each call is a new client and a new MCP session, as a
client that comes back hours later is. Run by tests/api/test_mcp_tasks.py with this folder's venv.

    task_client.py URL TOKEN call TOOL ARGUMENTS_JSON [TTL_MS]
    task_client.py URL TOKEN get|result|cancel TASK_ID
    task_client.py URL TOKEN list

Prints one JSON line: {"result": <the SDK's typed result, dumped as on the wire>} or
{"error": {"code": ..., "message": ...}}; also the negotiated capabilities under "capabilities".
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError


async def run(url: str, token: str, op: str, args: list[str]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=600)) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        tasks = session.experimental
        out: dict[str, Any] = {"capabilities": init.capabilities.model_dump(by_alias=True, exclude_none=True)}
        try:
            result: types.Result
            if op == "call":
                ttl = int(args[2]) if len(args) > 2 else 60000
                result = await tasks.call_tool_as_task(args[0], json.loads(args[1]), ttl=ttl)
            elif op == "get":
                result = await tasks.get_task(args[0])
            elif op == "result":
                result = await tasks.get_task_result(args[0], types.CallToolResult)
            elif op == "cancel":
                result = await tasks.cancel_task(args[0])
            elif op == "list":
                result = await tasks.list_tasks()
            else:
                raise SystemExit(f"unknown operation {op!r}")
            out["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        except McpError as exc:
            out["error"] = {"code": exc.error.code, "message": exc.error.message}
        return out


def main() -> None:
    url, token, op, *args = sys.argv[1:]
    print(json.dumps(asyncio.run(run(url, token, op, args))))


if __name__ == "__main__":
    main()
