"""MCP tasks on the 2026-07-28 wire (the Tasks extension), against a real server on both dialects: a
call from a client that declared the extension returns a task at once, `tasks/get` says `working`
until a person answers and then inlines exactly the plain call's result, `tasks/cancel` acknowledges
and cancels the request; without the extension declared the task methods answer -32021. Sent as the
2026 wire has it (no handshake, per-request `_meta`, the routing headers), with the SDK's own keys.
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest
from mcp.types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY, CallToolResult

from backend.api.mcp_tasks import POLL_INTERVAL_MS, TASKS_EXTENSION
from tests.api.client import Client
from tests.api.test_mcp import _sse_json, agent_session
from tests.api.test_mcp_queue_crash import KINDS, answer, received
from tests.api.test_mcp_tasks import ACTIVE, ARGUMENTS, TOOLS, pending_of
from tests.servers import Server

MODERN = "2026-07-28"
_ids = itertools.count(1)


async def rpc(
    server: Server, token: str, method: str, params: dict[str, Any], *, tasks: bool = True
) -> dict[str, Any]:
    """One self-contained 2026 request; the JSON-RPC response."""
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}
    meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: capabilities}
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": meta}}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        return _sse_json(await http.post("/mcp", json=body, headers=headers))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_2026_task_works_until_a_person_answers_then_inlines_the_plain_calls_result(
    server: Server, admin: Client, kind: str
) -> None:
    task_id, _, token = await agent_session(admin, f"mcp 2026 task {kind}")
    created = (await rpc(server, token, "tools/call", {"name": TOOLS[kind], "arguments": ARGUMENTS[kind]}))[
        "result"
    ]
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    assert created["ttlMs"] >= 7200 * 1000
    assert created["pollIntervalMs"] == POLL_INTERVAL_MS
    assert not {"ttl", "result"} & set(created)
    working = (await rpc(server, token, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert (working["status"], "result" in working) == ("working", False)
    await answer(kind, admin, await pending_of(admin, task_id, kind))
    done = (await rpc(server, token, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert (done["resultType"], done["status"]) == ("complete", "completed")
    received(kind, CallToolResult.model_validate(done["result"], by_name=False))
    again = (await rpc(server, token, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert again["result"] == done["result"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_2026_cancel_acknowledges_and_cancels_the_request(
    server: Server, admin: Client, kind: str
) -> None:
    task_id, _, token = await agent_session(admin, f"mcp 2026 cancel {kind}")
    created = (await rpc(server, token, "tools/call", {"name": TOOLS[kind], "arguments": ARGUMENTS[kind]}))[
        "result"
    ]
    ack = (await rpc(server, token, "tasks/cancel", {"taskId": created["taskId"]}))["result"]
    assert {k: v for k, v in ack.items() if k != "_meta"} == {"resultType": "complete"}
    after = (await rpc(server, token, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert after["status"] == "cancelled"
    sessions = (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]
    assert [(s["activeClarification"], s["activePermission"]) for s in sessions] == [(None, None)]
    # Idempotent on a settled task: the same empty acknowledgement.
    assert (await rpc(server, token, "tasks/cancel", {"taskId": created["taskId"]}))["result"][
        "resultType"
    ] == ("complete")


async def test_without_the_extension_the_task_methods_are_refused_and_unknown_tasks_are_invalid(
    server: Server, admin: Client
) -> None:
    _, _, token = await agent_session(admin, "mcp 2026 gate")
    gated = await rpc(server, token, "tasks/get", {"taskId": "nope"}, tasks=False)
    assert gated["error"]["code"] == -32021
    unknown = await rpc(server, token, "tasks/get", {"taskId": "nope"})
    assert unknown["error"]["code"] == -32602
    removed = [await rpc(server, token, m, {"taskId": "nope"}) for m in ("tasks/result", "tasks/list")]
    assert [r["error"]["code"] for r in removed] == [-32601, -32601]
