"""Hook events exactly as the clients document them, and `turnwise hook` run as a real process.

Claude Code: code.claude.com/docs/en/hooks ("Common input fields" and each event's input: session_id,
transcript_path, cwd, permission_mode, hook_event_name; PermissionRequest adds tool_name, tool_input
and the optional permission_suggestions, and has no tool_use_id). Codex: its generated hook input
schemas (codex-rs/hooks/schema/generated/*.command.input.schema.json: model and turn_id beside the
common fields, a nullable transcript_path, no permission_suggestions) and its hooks page
(SessionStart's source, SessionEnd's reason).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

BASH = {"command": "npm run migrate", "description": "Apply the database migrations"}
# Claude Code's suggestion shapes: the reference's example, and the addRules form the SDK documents.
SUGGESTIONS = [
    {"type": "toolAlwaysAllow", "tool": "Bash"},
    {
        "type": "addRules",
        "rules": [{"toolName": "Bash", "ruleContent": "npm run migrate"}],
        "behavior": "allow",
        "destination": "localSettings",
    },
]


@dataclass
class Agent:
    """One agent client session: its client, session id and folder."""

    client: str
    cwd: str
    session_id: str = ""

    def __post_init__(self) -> None:
        self.session_id = self.session_id or str(uuid.uuid4())

    def _common(self, event: str) -> dict[str, Any]:
        if self.client == "claude":
            return {
                "session_id": self.session_id,
                "transcript_path": f"/home/ann/.claude/projects/shop/{self.session_id}.jsonl",
                "cwd": self.cwd,
                "permission_mode": "default",
                "hook_event_name": event,
            }
        common = {
            "session_id": self.session_id,
            "transcript_path": None,
            "cwd": self.cwd,
            "hook_event_name": event,
        }
        if event != "SessionEnd":
            common |= {"model": "gpt-5-codex", "permission_mode": "default"}
        if event in ("PermissionRequest", "UserPromptSubmit", "Stop"):
            common["turn_id"] = str(uuid.uuid4())
        return common

    def permission_request(
        self, tool_input: dict[str, Any] | None = None, *, suggestions: bool = False
    ) -> dict[str, Any]:
        event = self._common("PermissionRequest") | {"tool_name": "Bash", "tool_input": tool_input or BASH}
        if suggestions:
            event["permission_suggestions"] = SUGGESTIONS
        return event

    def user_prompt_submit(self, prompt: str = "Apply the migrations") -> dict[str, Any]:
        return self._common("UserPromptSubmit") | {"prompt": prompt}

    def stop(self) -> dict[str, Any]:
        return self._common("Stop") | {"stop_hook_active": False, "last_assistant_message": "Done."}

    def session_start(self, source: str = "startup") -> dict[str, Any]:
        event = self._common("SessionStart") | {"source": source}
        if self.client == "claude":
            event["model"] = "claude-sonnet-4-6"
        return event

    def session_end(self) -> dict[str, Any]:
        return self._common("SessionEnd") | {"reason": "other"}


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def printed(self) -> Any:
        return json.loads(self.stdout) if self.stdout.strip() else None


def hook_command(client: str, wait: float | None = None) -> list[str]:
    command = [sys.executable, "-m", "backend.cli", "hook", "--client", client]
    return command if wait is None else [*command, "--wait", str(wait)]


def hook_env(url: str, token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNWISE_")}
    env["TURNWISE_URL"] = url
    if token is not None:
        env["TURNWISE_TOKEN"] = token
    return env


class Hook:
    """`turnwise hook` started as the client starts it: the event on its standard input."""

    def __init__(self, proc: asyncio.subprocess.Process, started: float) -> None:
        self.proc = proc
        self.started = started

    @classmethod
    async def start(
        cls, url: str, token: str | None, client: str, event: Any, *, wait: float | None = None
    ) -> Hook:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *hook_command(client, wait),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=hook_env(url, token),
        )
        assert proc.stdin is not None
        proc.stdin.write(event if isinstance(event, bytes) else json.dumps(event).encode())
        await proc.stdin.drain()
        proc.stdin.close()
        return cls(proc, started)

    async def result(self, timeout: float = 60.0) -> Ran:  # noqa: ASYNC109 - a test's bound
        out, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        assert self.proc.returncode is not None
        return Ran(self.proc.returncode, out.decode(), err.decode(), time.monotonic() - self.started)


async def run_hook(url: str, token: str | None, client: str, event: Any, *, wait: float | None = None) -> Ran:
    return await (await Hook.start(url, token, client, event, wait=wait)).result()
