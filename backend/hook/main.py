"""`turnwise hook`: one Claude Code or Codex hook event from standard input, reported to Turnwise.

Configured once with the block `turnwise hook --print-config` prints (`--client codex` for Codex's).
It talks to TURNWISE_URL with TURNWISE_TOKEN (a runner token, issueRunnerToken):

- PermissionRequest: a permission request in the client session's session. A rule decides at once;
  otherwise it waits up to --wait seconds for a person and prints the decision in the client's
  format. Nobody deciding in time: nothing printed (the client asks in its terminal), and Turnwise
  closes the request.
- UserPromptSubmit: a new turn (new work). Stop: the turn completes. SessionStart, SessionEnd: the
  session's state. Nothing printed (what these print would reach the model).

Never in the agent's way: bad input, an unknown event, Turnwise unreachable (within 2 s) or refusing
are one line on standard error and exit 0 with no decision. Imports only the standard library and
`backend.hook.wire`: a hook is a process per event (`python -X importtime -m backend.cli hook`).
"""

from __future__ import annotations

import json
import os
import sys
import time

from backend.hook.wire import HookError, Wire

TYPE_CHECKING = False  # as in `wire`: `typing` only for the type checker
if TYPE_CHECKING:
    from typing import Any

CLIENTS = ("claude", "codex")
# Both clients' default hook timeout is 600 s (Claude Code: "Defaults: 600 for command"; Codex: "If
# timeout is omitted, Codex uses 600 seconds"): the wait ends well before, and the printed config
# gives the hook that much more.
DEFAULT_WAIT = 540.0
CONFIG_MARGIN = 30
CONNECT_SECONDS = 2.0
REPLY_SECONDS = 5.0  # an event's answer, once connected
GRACE_SECONDS = 10.0  # past the wait, for Turnwise's own close to arrive
DENIED = "Denied in Turnwise."

EVENTS = {
    "SessionStart": "SESSION_START",
    "UserPromptSubmit": "USER_PROMPT_SUBMIT",
    "Stop": "STOP",
    "SessionEnd": "SESSION_END",
}
REPORT = """mutation($c: String!, $p: String!, $e: RunnerEvent!) {
  runnerEvent(clientSessionId: $c, project: $p, event: $e) { id } }"""
ASK = """subscription($c: String!, $p: String!, $n: String!, $i: JSON!, $w: Float) {
  runnerAskPermission(clientSessionId: $c, project: $p, toolName: $n, input: $i, waitSeconds: $w) {
    __typename ... on PermissionDecided { decision { behavior updatedInput message } } } }"""


def say(line: str) -> None:
    sys.stderr.write(f"turnwise hook: {line}\n")
    sys.stderr.flush()


# --- the event ------------------------------------------------------------------------------------


def _text(event: dict[str, Any], key: str, name: str) -> str:
    value = event.get(key)
    if not isinstance(value, str) or not value.strip():
        raise HookError(f"the {name} event has no {key}")
    return value


def parse_event(raw: bytes) -> dict[str, Any]:
    try:
        event = json.loads(raw)
    except ValueError as exc:
        raise HookError(f"standard input is not a hook event (JSON expected): {exc}") from None
    if not isinstance(event, dict):
        raise HookError("standard input is not a hook event (a JSON object expected)")
    name = event.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise HookError("standard input has no hook_event_name")
    if name != "PermissionRequest" and name not in EVENTS:
        raise HookError(f"{name} is not an event Turnwise takes (configure it with --print-config)")
    _text(event, "session_id", name)
    _text(event, "cwd", name)
    if name == "PermissionRequest":
        _text(event, "tool_name", name)
        if not isinstance(event.get("tool_input"), dict):
            raise HookError("the PermissionRequest event's tool_input is not a JSON object")
    return event


# --- the decision, as each client reads it --------------------------------------------------------


def decision_output(client: str, decision: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """The PermissionRequest hook output deciding it. Codex takes no updatedInput (it fails closed on
    one): there an allow with an edited input becomes a deny telling the agent the input allowed."""
    if decision.get("behavior") == "ALLOW":
        updated = decision.get("updatedInput")
        body: dict[str, Any] = {"behavior": "allow"}
        if client == "claude" and isinstance(updated, dict):
            body["updatedInput"] = updated
        elif client == "codex" and isinstance(updated, dict) and updated != asked:
            edited = json.dumps(updated, ensure_ascii=False)
            body = {
                "behavior": "deny",
                "message": f"Allowed in Turnwise only with this input, which Codex cannot apply here: "
                f"{edited}. Run it that way instead.",
            }
    else:
        body = {"behavior": "deny", "message": decision.get("message") or DENIED}
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": body}}


# --- talking to Turnwise --------------------------------------------------------------------------


def _environment(env: dict[str, str]) -> tuple[str, str]:
    url, token = env.get("TURNWISE_URL", "").strip(), env.get("TURNWISE_TOKEN", "").strip()
    if not url or not token:
        raise HookError("TURNWISE_URL and TURNWISE_TOKEN must be set (a runner token: issueRunnerToken)")
    return url, token


def run(client: str, wait: float, raw: bytes, env: dict[str, str]) -> dict[str, Any] | None:
    """What to print for one event (None: nothing). HookError: say why and step aside."""
    event = parse_event(raw)
    url, token = _environment(env)
    name = event["hook_event_name"]
    wire = Wire.open(url, token, CONNECT_SECONDS)
    try:
        if name == "PermissionRequest":
            return _permission(wire, client, wait, event)
        variables = {"c": event["session_id"], "p": event["cwd"], "e": EVENTS[name]}
        for _ in wire.operation(REPORT, variables, time.monotonic() + REPLY_SECONDS):
            pass
        return None
    except TimeoutError:
        raise HookError("Turnwise did not answer in time") from None
    except (OSError, ValueError) as exc:
        raise HookError(f"the connection to Turnwise failed: {exc}") from None
    finally:
        wire.close()


def _permission(wire: Wire, client: str, wait: float, event: dict[str, Any]) -> dict[str, Any] | None:
    asked = event["tool_input"]
    variables = {
        "c": event["session_id"],
        "p": event["cwd"],
        "n": event["tool_name"],
        "i": asked,
        "w": wait,
    }
    for data in wire.operation(ASK, variables, time.monotonic() + wait + GRACE_SECONDS):
        outcome = data.get("runnerAskPermission") or {}
        kind = outcome.get("__typename")
        if kind == "PermissionDecided":
            return decision_output(client, outcome.get("decision") or {}, asked)
        if kind in ("PermissionClosed", "PermissionDetached"):
            say("no decision in Turnwise (nobody decided in time, or new work came first): the terminal asks")
            return None
    return None


# --- configuration --------------------------------------------------------------------------------


def command(client: str, wait: float) -> str:
    """How the client runs this hook: this very `turnwise` (or this interpreter's module)."""
    import shlex

    program = sys.argv[0]
    if os.path.basename(program).startswith("turnwise"):
        words = [os.path.abspath(program)]
    else:
        words = [sys.executable, "-m", "backend.cli"]
    words += ["hook", "--client", client]
    if wait != DEFAULT_WAIT:
        words += ["--wait", f"{wait:g}"]
    return " ".join(shlex.quote(w) for w in words)


def config(client: str, wait: float, run_command: str) -> dict[str, Any]:
    """The hooks block: Claude Code's `.claude/settings.json` "hooks", or Codex's `hooks.json`
    (~/.codex/ or the repository's .codex/). Timeouts in seconds; Codex's SessionEnd allows 3 at most."""
    hooks: dict[str, Any] = {}
    for event in ("PermissionRequest", "UserPromptSubmit", "Stop", "SessionStart", "SessionEnd"):
        if event == "PermissionRequest":
            timeout = int(wait) + CONFIG_MARGIN
        else:
            timeout = 3 if (client, event) == ("codex", "SessionEnd") else 10
        group: dict[str, Any] = {"matcher": "*"} if event == "PermissionRequest" else {}
        group["hooks"] = [{"type": "command", "command": run_command, "timeout": timeout}]
        hooks[event] = [group]
    return {"hooks": hooks}


# --- the command ----------------------------------------------------------------------------------


USAGE = f"""usage: turnwise hook [--client {{claude,codex}}] [--wait SECONDS] [--print-config]

Report one Claude Code or Codex hook event (JSON on standard input) to Turnwise (TURNWISE_URL,
TURNWISE_TOKEN: a runner token).

  --client {{claude,codex}}  whose hook (default claude)
  --wait SECONDS           how long a permission request waits for a person (default {DEFAULT_WAIT:g},
                           below both clients' 600 s hook timeout)
  --print-config           print the hooks block for the client's settings
"""


class Usage(Exception):
    """A command line the hook cannot run with."""


def arguments(argv: list[str]) -> tuple[str, float, bool]:
    """(client, wait, print config). Parsed by hand: argparse costs the hook more than its work."""
    client, wait, print_config = "claude", DEFAULT_WAIT, False
    words = iter(argv)
    for word in words:
        flag, _, value = word.partition("=")
        if flag in ("--client", "--wait") and not value:
            value = next(words, "")
        if flag == "--client" and value in CLIENTS:
            client = value
        elif flag == "--wait":
            try:
                wait = float(value)
            except ValueError:
                raise Usage(f"--wait takes seconds, not {value!r}") from None
            if not 0 < wait < float("inf"):
                raise Usage("--wait must be more than 0 seconds")
        elif word == "--print-config":
            print_config = True
        else:
            raise Usage(f"unknown or incomplete argument {word!r}")
    return client, wait, print_config


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(USAGE)
        return 0
    try:
        client, wait, print_config = arguments(argv)
    except Usage as exc:
        # Not 2: from a hook that blocks the agent (Claude Code denies the permission, drops the prompt).
        say(f"{exc}\n{USAGE}")
        return 1
    if print_config:
        sys.stdout.write(json.dumps(config(client, wait, command(client, wait)), indent=2) + "\n")
        return 0
    try:
        output = run(client, wait, sys.stdin.buffer.read(), dict(os.environ))
    except HookError as exc:
        say(str(exc))
        return 0
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the agent is never blocked by it
        say(f"failed ({type(exc).__name__}: {exc}); the client decides on its own")
        return 0
    if output is not None:
        sys.stdout.write(json.dumps(output) + "\n")
        sys.stdout.flush()
    return 0
