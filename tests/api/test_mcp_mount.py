"""`/mcp` loads the MCP SDK on its first request (`backend/api/mcp_mount.py`): a process that never
serves MCP never imports it, and first requests arriving together all get the one endpoint."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.api.client import Client
from tests.api.test_mcp import agent_session
from tests.api.test_mcp_tasks_2026 import rpc
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database


def test_building_the_app_imports_no_mcp_sdk() -> None:
    # A process of its own: this one may have imported the SDK for other tests.
    code = (
        "import sys\n"
        "from backend.api.app import create_app\n"
        "from backend.config import Settings\n"
        "create_app(Settings(database_url='sqlite+aiosqlite:///:memory:'))\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'backend.api.mcp'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNWISE_")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "['backend.api.mcp_mount']"


async def test_first_requests_arriving_together_are_all_served(server: Server, admin: Client) -> None:
    _, _, token = await agent_session(admin, "mcp first requests")
    listed = await asyncio.gather(*(rpc(server, token, "tools/list", {}, tasks=False) for _ in range(6)))
    names = [sorted(t["name"] for t in r["result"]["tools"]) for r in listed]
    assert len({tuple(n) for n in names}) == 1
    assert "ask_user_question" in names[0]


@pytest.fixture
def built_at_start(pg_url: str) -> Iterator[Server]:
    del pg_url  # only checks that PostgreSQL is there; the server gets its own database
    url = fresh_database("postgresql")
    try:
        with Server(url, env={"TURNWISE_MCP_AT_START": "1"}) as server:
            yield server
    finally:
        drop_database(url)


async def test_with_mcp_at_start_the_endpoint_serves_as_well(built_at_start: Server) -> None:
    admin = Client(built_at_start.base_url, ADMIN_TOKEN)
    try:
        _, _, token = await agent_session(admin, "mcp at start")
    finally:
        await admin.aclose()
    listed = await rpc(built_at_start, token, "tools/list", {}, tasks=False)
    assert "approve_tool_use" in {t["name"] for t in listed["result"]["tools"]}
