"""MCP tasks on `/mcp`, 2025-11-25 wire: `ask_user_question` and `approve_tool_use` called as tasks through
the official 1.x Python SDK's client (its experimental tasks API, tests/mcp_client_v1), each operation
a client process of its own, against real servers: answered any time later, across a restart, on two
workers, cancelled, and listed for their caller only. The 2026-07-28 wire: tests/api/test_mcp_tasks_2026.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.types import CallToolResult

from backend.api.mcp_tasks import POLL_INTERVAL_MS
from tests.api import test_mcp_approvals as approvals
from tests.api.client import Client
from tests.api.test_mcp import QUESTION, agent_session, mcp_session
from tests.api.test_mcp_queue_crash import KINDS, answer, received
from tests.conftest import redis_url
from tests.dialects import fresh_db
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

CLIENT_V1 = Path(__file__).parents[1] / "mcp_client_v1"
PYTHON_V1 = CLIENT_V1 / ".venv/bin/python"
ARGUMENTS = {"clarification": {"questions": [QUESTION]}, "permission": approvals.CALL}
TOOLS = {"clarification": "ask_user_question", "permission": "approve_tool_use"}
ACTIVE = """query($t: ID!) { taskSessions(taskId: $t) {
  pendingAction activeClarification { pendingId } activePermission { pendingId } } }"""
NO_ANSWER = 1.5  # seconds nobody answers, before a person does


def v1(server: Server, token: str, op: str, *args: str) -> dict[str, Any]:
    """One operation through the 1.x SDK's tasks API, in a new client process (a new MCP session)."""
    if not PYTHON_V1.exists():
        message = "the 1.x MCP client needs `make mcp-client-v1` (tests/mcp_client_v1)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    run = subprocess.run(
        [str(PYTHON_V1), str(CLIENT_V1 / "task_client.py"), f"{server.base_url}/mcp", token, op, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


async def call(server: Server, token: str, kind: str) -> dict[str, Any]:
    """The tool called as a task: the task, returned at once."""
    out = await asyncio.to_thread(v1, server, token, "call", TOOLS[kind], json.dumps(ARGUMENTS[kind]))
    assert "result" in out, out
    return dict(out["result"]["task"])


async def op(server: Server, token: str, name: str, *args: str) -> dict[str, Any]:
    return await asyncio.to_thread(v1, server, token, name, *args)


async def pending_of(admin: Client, task_id: str, kind: str) -> str:
    field = "activeClarification" if kind == "clarification" else "activePermission"
    for _ in range(200):
        for s in (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]:
            if s[field]:
                return str(s[field]["pendingId"])
        await asyncio.sleep(0.025)
    raise AssertionError("no open request")


def tool_result(out: dict[str, Any]) -> CallToolResult:
    assert "result" in out, out
    return CallToolResult.model_validate(out["result"], by_name=False)


@asynccontextmanager
async def admin_client(server: Server) -> AsyncIterator[Client]:
    client = Client(server.base_url, ADMIN_TOKEN)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def admin_of(server: Server) -> AsyncIterator[Client]:
    async with admin_client(server) as client:
        yield client


@pytest.mark.parametrize("kind", KINDS)
async def test_a_task_answered_any_time_later_returns_what_the_plain_call_would_have(
    server: Server, admin_of: Client, kind: str
) -> None:
    task_id, _, token = await agent_session(admin_of, f"mcp task {kind}")
    task = await call(server, token, kind)
    assert task["status"] == "input_required"
    assert task["ttl"] >= 7200 * 1000  # at least the longest wait the server allows
    assert task["pollInterval"] == POLL_INTERVAL_MS
    pending_id = await pending_of(admin_of, task_id, kind)
    await asyncio.sleep(NO_ANSWER)
    waiting = await op(server, token, "get", task["taskId"])
    assert waiting["result"]["status"] == "input_required"
    await answer(kind, admin_of, pending_id)
    done = await op(server, token, "get", task["taskId"])
    first = await op(server, token, "result", task["taskId"])
    again = await op(server, token, "result", task["taskId"])
    assert done["result"]["status"] == "completed"
    received(kind, tool_result(first))
    assert again == first  # the same result, however often it is read
    assert first["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}


@pytest.mark.parametrize("kind", KINDS)
async def test_tasks_result_waits_for_the_person_and_returns_the_answer(
    server: Server, admin_of: Client, kind: str
) -> None:
    task_id, _, token = await agent_session(admin_of, f"mcp task blocking {kind}")
    task = await call(server, token, kind)
    pending_id = await pending_of(admin_of, task_id, kind)
    blocked = asyncio.create_task(op(server, token, "result", task["taskId"]))
    await asyncio.sleep(NO_ANSWER)
    assert not blocked.done()
    await answer(kind, admin_of, pending_id)
    received(kind, tool_result(await asyncio.wait_for(blocked, 60)))


@pytest.mark.parametrize("kind", KINDS)
async def test_cancelling_a_task_cancels_its_request_and_closes_its_card(
    server: Server, admin_of: Client, kind: str
) -> None:
    task_id, _, token = await agent_session(admin_of, f"mcp task cancel {kind}")
    task = await call(server, token, kind)
    pending_id = await pending_of(admin_of, task_id, kind)
    cancelled = await op(server, token, "cancel", task["taskId"])
    assert cancelled["result"]["status"] == "cancelled"
    assert (await op(server, token, "get", task["taskId"]))["result"]["status"] == "cancelled"
    sessions = (await admin_of.execute(ACTIVE, {"t": task_id}))["taskSessions"]
    assert [(s["activeClarification"], s["activePermission"]) for s in sessions] == [(None, None)]
    late = await answer(kind, admin_of, pending_id)
    assert late["__typename"] == "ClarificationConflict"
    # A settled task cannot be cancelled again (the 2025-11-25 wire's invalid params).
    assert (await op(server, token, "cancel", task["taskId"]))["error"]["code"] == -32602


async def test_tasks_list_and_reads_are_the_callers_own(server: Server, admin_of: Client) -> None:
    _, _, mine = await agent_session(admin_of, "mcp task list mine")
    _, _, theirs = await agent_session(admin_of, "mcp task list theirs")
    own = [await call(server, mine, kind) for kind in KINDS]
    other = await call(server, theirs, "clarification")
    listed = (await op(server, mine, "list"))["result"]["tasks"]
    assert [t["taskId"] for t in listed] == [t["taskId"] for t in own]
    assert {t["status"] for t in listed} == {"input_required"}
    for name in ("get", "result", "cancel"):
        refused = await op(server, mine, name, other["taskId"])
        assert refused["error"]["code"] == -32602, refused
    assert (await op(server, theirs, "get", other["taskId"]))["result"]["status"] == "input_required"


async def test_the_server_declares_tasks_and_each_waiting_tools_task_support(server: Server) -> None:
    async with admin_client(server) as admin:
        _, _, token = await agent_session(admin, "mcp task capability")
    out = await op(server, token, "list")
    assert out["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    async with mcp_session(server.base_url, token) as mcp:
        tools = {t.name: t.execution for t in (await mcp.list_tools()).tools}
    assert {n: e.task_support if e else None for n, e in tools.items()} == {
        "ask_user_question": "optional",
        "approve_tool_use": "optional",
        "wait_for_answer": None,
    }


# --- durable: a restart, two workers ------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def own_database(request: pytest.FixtureRequest) -> Iterator[str]:
    with fresh_db(request.param, request) as url:
        yield url


@pytest.mark.parametrize("kind", KINDS)
async def test_a_task_survives_a_restart_between_the_call_and_the_answer(
    own_database: str, kind: str
) -> None:
    with Server(own_database) as before:
        async with admin_client(before) as admin:
            task_id, _, token = await agent_session(admin, f"mcp task restart {kind}")
            task = await call(before, token, kind)
            pending_id = await pending_of(admin, task_id, kind)
    with Server(own_database) as after:
        assert (await op(after, token, "get", task["taskId"]))["result"]["status"] == "input_required"
        async with admin_client(after) as admin:
            await answer(kind, admin, pending_id)
        received(kind, tool_result(await op(after, token, "result", task["taskId"])))


@pytest.fixture
def two_workers(pg_url: str) -> Iterator[Server]:
    del pg_url  # only checks that PostgreSQL is there; the server gets its own database
    url = fresh_database("postgresql")
    server = Server(url, broadcast_url=redis_url(), env={"TURNWISE_WORKERS": "2"})
    try:
        yield server.start()
    finally:
        server.stop()
        drop_database(url)


@pytest.mark.parametrize("kind", KINDS)
async def test_on_two_workers_every_call_of_a_task_finds_it(two_workers: Server, kind: str) -> None:
    async with admin_client(two_workers) as admin:
        task_id, _, token = await agent_session(admin, f"mcp task workers {kind}")
        tasks = [await call(two_workers, token, kind) for _ in range(2)]
        assert tasks[0]["taskId"] != tasks[1]["taskId"]
        # The identical open request is the same pending action: one answer settles both tasks.
        pending_id = await pending_of(admin, task_id, kind)
        reads = [await op(two_workers, token, "get", t["taskId"]) for t in tasks * 3]
        assert {r["result"]["status"] for r in reads} == {"input_required"}
        blocked = asyncio.create_task(op(two_workers, token, "result", tasks[0]["taskId"]))
        await asyncio.sleep(NO_ANSWER)
        await answer(kind, admin, pending_id)
        first = tool_result(await asyncio.wait_for(blocked, 60))
    received(kind, first)
    # Read again on either worker: the one stored result. The other task on the same request was
    # answered by the same decision (as the plain call waiting on it would have been told).
    again = [await op(two_workers, token, "result", tasks[0]["taskId"]) for _ in range(4)]
    assert {json.dumps(a, sort_keys=True) for a in again} == {json.dumps(again[0], sort_keys=True)}
    other = await op(two_workers, token, "get", tasks[1]["taskId"])
    assert other["result"]["status"] == "completed"
