"""`turnwise hook` when a rule decides: process start -> decision printed, p50 and p99 over 100 runs.

A hook is a process per permission prompt, so this is what a Claude Code or Codex user waits for
each time a remembered rule allows a tool: the installed `turnwise` command started with Claude
Code's PermissionRequest event on its standard input, until its decision line is read from its
standard output. Against a real server (`turnwise serve`) on each dialect, with a runner token whose
session already has the rule. Target: p50 and p99 at most 150 ms. Beside it, the floor: this
interpreter starting and exiting with nothing to do (a busy machine moves both).

`python -m bench hook`; TURNWISE_BENCH_HOOK_RUNS (default 100). Results: bench/results/hook.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

RUNS = int(os.environ.get("TURNWISE_BENCH_HOOK_RUNS", "100"))
WARMUP = 10
TARGET_MS = 150.0
BASH = {"command": "npm test", "description": "Run the tests"}


def hook_command() -> list[str]:
    """The installed `turnwise` (as a client runs it), or this interpreter's module without one."""
    installed = Path(sys.executable).with_name("turnwise")
    found = str(installed) if installed.exists() else shutil.which("turnwise")
    return [found, "hook"] if found else [sys.executable, "-m", "backend.cli", "hook"]


def event(session_id: str, cwd: str) -> bytes:
    return json.dumps(
        {
            "session_id": session_id,
            "transcript_path": f"/home/ann/.claude/projects/bench/{session_id}.jsonl",
            "cwd": cwd,
            "permission_mode": "default",
            "hook_event_name": "PermissionRequest",
            "tool_name": "Bash",
            "tool_input": BASH,
            "permission_suggestions": [{"type": "toolAlwaysAllow", "tool": "Bash"}],
        }
    ).encode()


def once(command: list[str], env: dict[str, str], stdin: bytes) -> tuple[float, str]:
    """(seconds from process start to its decision line, that line)."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    line = proc.stdout.readline().decode()
    elapsed = time.perf_counter() - started
    proc.wait()
    return elapsed, line


async def with_rule(base_url: str, admin_token: str) -> tuple[str, str, str]:
    """(runner token, client session id, folder): a session whose rule allows the bench's Bash call."""
    from tests.api.client import Client
    from tests.hooks.events import Agent, Hook
    from tests.hooks.runner import person, runner_token

    admin = Client(base_url, admin_token)
    try:
        _, person_token = await person(admin)
        runner = (await runner_token(base_url, person_token, "bench"))["token"]
        agent = Agent("claude", f"/home/ann/src/bench-{uuid.uuid4().hex[:6]}")
        first = await Hook.start(base_url, runner, "claude", agent.permission_request(BASH), wait=60)
        tasks = "{ tasks { project sessions { activePermission { pendingId } } } }"
        pending_id = None
        while pending_id is None:
            for task in (await admin.execute(tasks))["tasks"]:
                for session in task["sessions"] if task["project"] == agent.cwd else []:
                    pending_id = (session["activePermission"] or {}).get("pendingId") or pending_id
            await asyncio.sleep(0.05)
        mine = Client(base_url, person_token)
        try:
            await mine.execute(
                "mutation($p: ID!) { respondToPermission(pendingId: $p, behavior: ALLOW, remember: true) "
                "{ __typename } }",
                {"p": pending_id},
            )
        finally:
            await mine.aclose()
        await first.result()
        return runner, agent.session_id, agent.cwd
    finally:
        await admin.aclose()


def bare_python(env: dict[str, str]) -> float:
    """The floor: this interpreter starting and exiting, with its site packages, doing nothing."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    return time.perf_counter() - started


def measure(base_url: str, admin_token: str) -> dict[str, Any]:
    """Hook runs alternating with bare interpreter runs, so a busy machine weighs on both alike."""
    from bench.common import median, pct

    runner, session_id, cwd = asyncio.run(with_rule(base_url, admin_token))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNWISE_")}
    env |= {"TURNWISE_URL": base_url, "TURNWISE_TOKEN": runner}
    command, stdin = hook_command(), event(session_id, cwd)
    samples, floor = [], []
    for i in range(WARMUP + RUNS):
        seconds, line = once(command, env, stdin)
        decision = json.loads(line)["hookSpecificOutput"]["decision"]
        assert decision == {"behavior": "allow", "updatedInput": BASH}, line
        bare = bare_python(env)
        if i >= WARMUP:
            samples.append(seconds)
            floor.append(bare)
    return {
        "runs": RUNS,
        "command": " ".join(command[-2:]),
        "p50_ms": round(median(samples) * 1e3, 1),
        "p99_ms": round(pct(samples, 99) * 1e3, 1),
        "min_ms": round(min(samples) * 1e3, 1),
        "target_ms": TARGET_MS,
        # The part that is ours: what the hook adds to an interpreter starting and exiting.
        "python_start_p50_ms": round(median(floor) * 1e3, 1),
        "python_start_p99_ms": round(pct(floor, 99) * 1e3, 1),
        "over_python_start_p50_ms": round(
            median([h - f for h, f in zip(samples, floor, strict=True)]) * 1e3, 1
        ),
    }


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))  # the tests package: real servers
    from bench.common import write_result
    from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

    results: dict[str, Any] = {}
    for dialect in ("sqlite", "postgresql"):
        url = fresh_database(dialect)
        server = Server(url).start()
        try:
            results[dialect] = measure(server.base_url, ADMIN_TOKEN)
        finally:
            server.stop()
            drop_database(url)
        figures = results[dialect]
        met = figures["p50_ms"] <= TARGET_MS and figures["p99_ms"] <= TARGET_MS
        print(json.dumps({dialect: figures}, indent=2), f"target met: {met}", flush=True)
    print(f"written {write_result('hook', results)}")


if __name__ == "__main__":
    main()
