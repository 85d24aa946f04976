"""`turnwise hook` never stands in its agent's way: bad input, an unknown event, no settings, or
Turnwise down is one line on standard error, exit 0 and no decision (the client asks in its
terminal); what it prints to configure a client is the hooks block that client documents."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.hooks.conftest import Owner
from tests.hooks.events import Agent, hook_command, hook_env, run_hook
from tests.servers import Server, free_port

CLAUDE = Agent("claude", "/home/ann/src/shop")


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        (b"", "not a hook event"),
        (b"{not json", "not a hook event"),
        (b"\xff\xfe", "not a hook event"),
        (b"[1, 2]", "a JSON object expected"),
        (json.dumps({"session_id": "s", "cwd": "/src"}).encode(), "no hook_event_name"),
        (
            json.dumps({**CLAUDE.stop(), "hook_event_name": "PreToolUse"}).encode(),
            "PreToolUse is not an event",
        ),
        (json.dumps({**CLAUDE.stop(), "session_id": ""}).encode(), "has no session_id"),
        (json.dumps({k: v for k, v in CLAUDE.stop().items() if k != "cwd"}).encode(), "has no cwd"),
        (json.dumps({**CLAUDE.permission_request(), "tool_input": "rm -rf /"}).encode(), "not a JSON object"),
        (json.dumps({**CLAUDE.permission_request(), "tool_name": None}).encode(), "has no tool_name"),
    ],
    ids=[
        "empty",
        "not-json",
        "not-utf8",
        "array",
        "no-event-name",
        "unknown-event",
        "no-session",
        "no-cwd",
        "input-not-object",
        "no-tool",
    ],
)
async def test_bad_input_is_a_line_on_stderr_and_no_decision(
    server: Server, owner: Owner, stdin: bytes, says: str
) -> None:
    ran = await run_hook(server.base_url, owner.runner_token, "claude", stdin)
    assert (ran.returncode, ran.stdout) == (0, "")
    assert ran.stderr.startswith("turnwise hook: ")
    assert says in ran.stderr
    assert ran.stderr.count("\n") == 1
    assert "Traceback" not in ran.stderr


async def test_without_its_settings_the_hook_says_which_and_steps_aside(server: Server) -> None:
    ran = await run_hook(server.base_url, None, "claude", CLAUDE.permission_request())
    assert (ran.returncode, ran.stdout) == (0, "")
    assert "TURNWISE_TOKEN" in ran.stderr


async def test_a_refused_token_is_a_line_on_stderr_and_no_decision(server: Server) -> None:
    ran = await run_hook(
        server.base_url, "not-a-token", "codex", Agent("codex", "/src/x").permission_request()
    )
    assert (ran.returncode, ran.stdout) == (0, "")
    assert ran.stderr.startswith("turnwise hook: ")


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A Turnwise that accepts connections and never answers (a hung host)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("down", ["nothing-listening", "never-answers"])
@pytest.mark.parametrize("client", ["claude", "codex"])
async def test_turnwise_down_steps_aside_within_two_seconds(
    silent_server: str, down: str, client: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}" if down == "nothing-listening" else silent_server
    agent = Agent(client, "/home/ann/src/shop")
    for event in (agent.permission_request(), agent.user_prompt_submit()):
        ran = await run_hook(url, "a-runner-token", client, event, wait=60)
        assert (ran.returncode, ran.stdout) == (0, "")
        assert ran.stderr.startswith("turnwise hook: ")
        # The connect bound is 2 s; the rest is a Python process starting on a busy machine.
        assert ran.seconds < 5


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_the_printed_config_is_the_hooks_block_the_client_documents(client: str) -> None:
    done = subprocess.run(
        [*hook_command(client, 120), "--print-config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=hook_env("http://unused", None),
        check=True,
    )
    printed = json.loads(done.stdout)
    assert set(printed) == {"hooks"}
    hooks = printed["hooks"]
    assert set(hooks) == {"PermissionRequest", "UserPromptSubmit", "Stop", "SessionStart", "SessionEnd"}
    for event, groups in hooks.items():
        (group,) = groups
        assert set(group) == ({"matcher", "hooks"} if event == "PermissionRequest" else {"hooks"})
        (handler,) = group["hooks"]
        assert set(handler) == {"type", "command", "timeout"}
        assert handler["type"] == "command"
        assert handler["command"].endswith(f"hook --client {client} --wait 120")
        assert isinstance(handler["timeout"], int)
    assert hooks["PermissionRequest"][0]["matcher"] == "*"
    # The wait ends well before the client stops the hook.
    assert hooks["PermissionRequest"][0]["hooks"][0]["timeout"] > 120
    # Codex allows its SessionEnd hooks 3 seconds at most.
    assert hooks["SessionEnd"][0]["hooks"][0]["timeout"] == (3 if client == "codex" else 10)


@pytest.mark.parametrize("argv", [["--wait", "0"], ["--wait", "soon"], ["--client", "cursor"], ["--bogus"]])
def test_a_bad_command_line_never_exits_2_which_would_block_the_agent(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", "hook", *argv],
        input=json.dumps(CLAUDE.permission_request()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("turnwise hook: ")


def test_the_hook_imports_nothing_of_the_server() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "backend.cli", "hook"],
        input="{}",
        capture_output=True,
        text=True,
        timeout=60,
        env=hook_env("http://unused", "t"),
    )
    assert done.returncode == 0
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    ours = {m for m in modules if m.split(".")[0] == "backend"}
    # (`-m backend.cli` runs the CLI as __main__: it may or may not be listed under its own name.)
    assert {"backend.hook.main", "backend.hook.wire"} <= ours
    assert ours <= {"backend", "backend.cli", "backend.hook", "backend.hook.main", "backend.hook.wire"}
    heavy = {"asyncio", "pydantic", "sqlalchemy", "strawberry", "httpx", "websockets", "uvicorn", "argparse"}
    assert not modules & heavy
