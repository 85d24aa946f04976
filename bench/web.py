"""Web app figures in headless Chromium (MicroPython): page load to an interactive 200-task list, and
activating a pending task until its question is visible."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from backend.client import GraphQLTransport
from bench.common import median, pct, run, write_result

TASKS = 200
PENDING_EVERY = 10  # every tenth task has a detached question in its secondary session
RUNS = 9
TOKEN = "bench-admin-token"
CHROMIUM = os.environ.get("TURNWISE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ASK = """subscription($s: ID!) { askClarification(sessionId: $s, timeoutSeconds: 0.05, questions: [
  {id: "q", prompt: "Which retry policy?", options: [{label: "Backoff"}, {label: "Fixed"}]}]) {
  __typename } }"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server() -> tuple[subprocess.Popen[bytes], str]:
    folder = Path(tempfile.mkdtemp(prefix="turnwise-bench-web-"))
    port = _free_port()
    env = {
        **os.environ,
        "TURNWISE_DATABASE_URL": f"sqlite+aiosqlite:///{folder / 'turnwise.db'}",
        "TURNWISE_BOOTSTRAP_TOKEN": TOKEN,
        "TURNWISE_PORT": str(port),
    }
    log = (folder / "server.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "backend.cli", "serve"], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not become ready")


async def _gql(http: httpx.AsyncClient, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    body = (await http.post("/graphql", json={"query": query, "variables": variables})).json()
    assert not body.get("errors"), body
    return dict(body["data"])


async def _ask_and_detach(base: str, session_id: str) -> None:
    transport = GraphQLTransport(base, TOKEN)
    try:
        async with transport.subscribe(ASK, {"s": session_id}) as results:
            async for data in results:  # asked, then detached after the short wait
                if data["askClarification"]["__typename"] == "ClarificationDetached":
                    return
    finally:
        await transport.aclose()


async def _seed(base: str) -> list[str]:
    """200 tasks of two running sessions each; every tenth has a question in its secondary session."""
    pending = []
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as http:
        for n in range(TASKS):
            task = await _gql(
                http, "mutation($t: String!) { createTask(title: $t) { id } }", {"t": f"Task {n}"}
            )
            task_id = task["createTask"]["id"]
            sessions = []
            for primary in (True, False):
                created = await _gql(
                    http,
                    "mutation($t: ID!, $p: Boolean!) { createSession(taskId: $t, isPrimary: $p) { id } }",
                    {"t": task_id, "p": primary},
                )
                session_id = created["createSession"]["id"]
                await _gql(
                    http,
                    "mutation($s: ID!) { setSessionState(sessionId: $s, state: RUNNING) { id } }",
                    {"s": session_id},
                )
                await _gql(http, "mutation($s: ID!) { startTurn(sessionId: $s) { id } }", {"s": session_id})
                sessions.append(session_id)
            if n % PENDING_EVERY == 0:
                await _ask_and_detach(base, sessions[1])
                pending.append(task_id)
    return pending


async def _measure(base: str, pending: list[str]) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    loads: list[float] = []
    activations: list[float] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for i in range(RUNS + 1):
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            page = await context.new_page()
            await page.goto(base + "/#token=" + TOKEN)
            await page.wait_for_selector("html[data-ready=true]", state="attached", timeout=30_000)
            ready_ms = float(await page.evaluate("document.documentElement.dataset.readyAt"))
            rows = await page.locator("[data-testid^=task-row-]").count()
            assert rows == TASKS, rows
            task_id = pending[i % len(pending)]
            started = time.perf_counter()
            await page.get_by_test_id(f"task-row-{task_id}").click()
            await page.get_by_test_id("clarification-card").wait_for(state="visible", timeout=30_000)
            activated = time.perf_counter() - started
            await context.close()
            if i == 0:
                continue  # warm-up: the server's first requests and the OS file cache
            loads.append(ready_ms / 1000)
            activations.append(activated)
        await browser.close()
    return {
        "runs": RUNS,
        "tasks": TASKS,
        "load_to_interactive_list_s": {"p50": median(loads), "p90": pct(loads, 90), "samples": loads},
        "activate_pending_to_question_s": {
            "p50": median(activations),
            "p90": pct(activations, 90),
            "samples": activations,
        },
    }


def main() -> None:
    proc, base = _start_server()
    try:
        pending = run(_seed(base))
        result = run(_measure(base, pending))
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    result["runtime"] = "MicroPython 1.28 under PyScript 0.7.31, headless Debian Chromium, localhost, SQLite"
    path = write_result("web", result)
    load, act = result["load_to_interactive_list_s"], result["activate_pending_to_question_s"]
    for label, figures in (
        (f"page load to interactive {TASKS}-task list", load),
        ("activate to question", act),
    ):
        print(f"{label}: p50 {figures['p50'] * 1000:.0f} ms, p90 {figures['p90'] * 1000:.0f} ms")
    print(f"written to {path}")
