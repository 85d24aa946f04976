"""`turnwise serve` from process start to ready, and its first MCP request, with the MCP SDK loaded
on `/mcp`'s first request (the default, `backend/api/mcp_mount.py`) and at startup
(`TURNWISE_MCP_AT_START=1`), in alternating rounds on one migrated SQLite database.

Why it matters: every worker of `turnwise serve --workers N`, every restart, and each of the test
suite's several hundred servers pays the start; only a process that serves MCP pays the SDK.

Per way, over TURNWISE_BENCH_STARTUP_RUNS rounds (default 10): **ready** (spawn -> `/readyz` answers
200, polled every 10 ms), **first MCP** (the first `tools/list` sent once ready -> its answer), and
**CPU to ready** (the server's user + system time when it is ready). `python -m bench startup`.
Results: bench/results/startup.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

RUNS = int(os.environ.get("TURNWISE_BENCH_STARTUP_RUNS", "10"))
WAYS = {"mcp on first request": {}, "TURNWISE_MCP_AT_START=1": {"TURNWISE_MCP_AT_START": "1"}}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def once(url: str, token: str, setting: dict[str, str]) -> dict[str, float]:
    from tests.servers import ADMIN_TOKEN, free_port

    port = free_port()
    env = {
        **os.environ,
        "TURNWISE_DATABASE_URL": url,
        "TURNWISE_BOOTSTRAP_TOKEN": ADMIN_TOKEN,
        "TURNWISE_BROADCAST_URL": "memory://",
        **setting,
    }
    command = [sys.executable, "-m", "backend.cli", "serve", "--port", str(port)]
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220 - its start is what is timed
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError("turnwise serve exited before it was ready")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.01)
            ready = time.perf_counter() - started
            cpu = cpu_seconds(proc.pid)
            headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
            headers["MCP-Protocol-Version"] = "2025-11-25"
            sent = time.perf_counter()
            answered = await http.post("/mcp", json=TOOLS_LIST, headers=headers)
            first_mcp = time.perf_counter() - sent
            assert answered.status_code == 200, answered.text
        return {"ready": ready, "first_mcp": first_mcp, "cpu_to_ready": cpu}
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 15)


async def agent_token(url: str) -> str:
    """A session agent's token, made once through a server of its own."""
    from tests.api.client import Client
    from tests.api.test_mcp import agent_session
    from tests.servers import ADMIN_TOKEN, Server

    with Server(url) as server:
        admin = Client(server.base_url, ADMIN_TOKEN)
        try:
            _, _, token = await agent_session(admin, "bench startup")
        finally:
            await admin.aclose()
    return token


async def measure(url: str) -> dict[str, Any]:
    token = await agent_token(url)
    samples: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for _ in range(RUNS):
        for way, setting in WAYS.items():
            samples[way].append(await once(url, token, setting))
    results: dict[str, Any] = {}
    for way, runs in samples.items():
        results[way] = {
            f"{figure}_ms_median": round(statistics.median(r[figure] for r in runs) * 1000, 1)
            for figure in ("ready", "first_mcp", "cpu_to_ready")
        }
    lazy, eager = (results[w]["ready_ms_median"] for w in WAYS)
    results["ready: at start / on first request"] = round(eager / lazy, 2)
    return results


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))  # the tests package: servers, clients
    from bench.common import write_result
    from tests.servers import drop_database, fresh_database

    url = fresh_database("sqlite")
    try:
        results = asyncio.run(measure(url))
    finally:
        drop_database(url)
    for way, figures in results.items():
        print(f"  {way}: {figures}", flush=True)
    print(f"written {write_result('startup', results)}")


if __name__ == "__main__":
    main()
