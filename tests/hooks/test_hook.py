"""`turnwise hook` as Claude Code and Codex run it: a real process fed each event as the client
documents it, against a real server of each dialect, deciding through a person's runner token."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.api.client import Client
from tests.hooks.conftest import Owner
from tests.hooks.events import BASH, Agent, Hook, run_hook
from tests.servers import Server

TASKS = """{ tasks { id title project
  sessions { id state isPrimary activePermission { pendingId state } } } }"""
TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id completedAt } }"
RESPOND = """mutation($p: ID!, $b: PermissionBehavior!, $i: JSON, $m: String, $r: Boolean! = false) {
  respondToPermission(pendingId: $p, behavior: $b, updatedInput: $i, message: $m, remember: $r) {
    __typename ... on ClarificationConflict { reason } } }"""
PERMISSION = "query($p: ID!) { permission(pendingId: $p) { state decision { behavior } } }"
RULES = "query($s: ID!) { permissionRules(sessionId: $s) { id toolName } }"

PERMISSION_EVENTS = [("claude", True), ("claude", False), ("codex", False)]
PERMISSION_IDS = ["claude-with-suggestions", "claude", "codex"]
CLIENTS = ["claude", "codex"]


def folder() -> str:
    return f"/home/ann/src/shop-{uuid.uuid4().hex[:6]}"


async def task_of(admin: Client, cwd: str) -> dict[str, Any] | None:
    found = [t for t in (await admin.execute(TASKS))["tasks"] if t["project"] == cwd]
    assert len(found) <= 1, found
    return found[0] if found else None


async def waiting_request(admin: Client, cwd: str, hook: Hook) -> tuple[str, str]:
    """(session id, pending id) of the request the hook waits on, once Turnwise shows it."""
    for _ in range(400):
        task = await task_of(admin, cwd)
        for session in task["sessions"] if task else []:
            if session["activePermission"]:
                return session["id"], session["activePermission"]["pendingId"]
        assert hook.proc.returncode is None, await hook.result()
        await asyncio.sleep(0.05)
    raise AssertionError(f"no request of {cwd} appeared")


async def respond(server: Server, owner: Owner, pending_id: str, behavior: str, **kw: Any) -> dict[str, Any]:
    person = Client(server.base_url, owner.token)
    try:
        variables = {"p": pending_id, "b": behavior, "i": kw.get("updated"), "m": kw.get("message")}
        variables["r"] = kw.get("remember", False)
        return dict((await person.execute(RESPOND, variables))["respondToPermission"])
    finally:
        await person.aclose()


def decision(printed: Any) -> dict[str, Any]:
    assert set(printed) == {"hookSpecificOutput"}
    output = printed["hookSpecificOutput"]
    assert set(output) == {"hookEventName", "decision"}
    assert output["hookEventName"] == "PermissionRequest"
    return dict(output["decision"])


# --- a person decides -----------------------------------------------------------------------------


EDITED = {**BASH, "command": "npm run migrate -- --dry-run"}
# (what the person sends, what each client is printed); Codex fails closed on updatedInput, so an
# edit reaches it as a denial that names the input allowed, which the agent then runs.
DECISIONS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "allow-edited": (
        {"behavior": "ALLOW", "updated": EDITED},
        {"claude": {"behavior": "allow", "updatedInput": EDITED}, "codex": "deny naming the edit"},
    ),
    "allow-as-asked": (
        {"behavior": "ALLOW"},
        {"claude": {"behavior": "allow", "updatedInput": BASH}, "codex": {"behavior": "allow"}},
    ),
    "deny-with-reason": (
        {"behavior": "DENY", "message": "not on staging today"},
        {client: {"behavior": "deny", "message": "not on staging today"} for client in CLIENTS},
    ),
}


@pytest.mark.parametrize("decided", sorted(DECISIONS))
@pytest.mark.parametrize(("client", "suggestions"), PERMISSION_EVENTS, ids=PERMISSION_IDS)
async def test_a_person_decides_and_the_hook_prints_it_as_the_client_reads_it(
    server: Server, admin: Client, owner: Owner, client: str, suggestions: bool, decided: str
) -> None:
    sent, printed = DECISIONS[decided]
    agent = Agent(client, folder())
    hook = await Hook.start(
        server.base_url,
        owner.runner_token,
        client,
        agent.permission_request(suggestions=suggestions),
        wait=60,
    )
    _, pending_id = await waiting_request(admin, agent.cwd, hook)
    sent = dict(sent)
    responded = await respond(server, owner, pending_id, str(sent.pop("behavior")), **sent)
    assert responded["__typename"] == "PermissionResponded"
    ran = await hook.result()
    assert (ran.returncode, ran.stderr) == (0, "")
    if printed[client] == "deny naming the edit":
        denied = decision(ran.printed)
        assert denied["behavior"] == "deny"
        assert "npm run migrate -- --dry-run" in denied["message"]
    else:
        assert decision(ran.printed) == printed[client]


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_remembered_rule_decides_the_next_request_at_once(
    server: Server, admin: Client, owner: Owner, client: str
) -> None:
    agent = Agent(client, folder())
    first = await Hook.start(server.base_url, owner.runner_token, client, agent.permission_request(), wait=60)
    session_id, pending_id = await waiting_request(admin, agent.cwd, first)
    await respond(server, owner, pending_id, "ALLOW", remember=True)
    assert decision((await first.result()).printed)["behavior"] == "allow"
    assert [r["toolName"] for r in (await admin.execute(RULES, {"s": session_id}))["permissionRules"]] == [
        "Bash"
    ]
    # Nobody acts now: only the rule can decide it.
    ran = await run_hook(server.base_url, owner.runner_token, client, agent.permission_request(), wait=60)
    allowed = {"behavior": "allow", "updatedInput": BASH} if client == "claude" else {"behavior": "allow"}
    assert decision(ran.printed) == allowed
    task = await task_of(admin, agent.cwd)
    assert task is not None
    assert [s["activePermission"] for s in task["sessions"]] == [None]


# --- nobody decides, or new work comes first ------------------------------------------------------


# How the wait ends -> (the request's state then, a late answer's conflict).
ENDS = {
    "nobody-decides": ("TERMINAL", "TERMINAL"),
    "hook-goes-away": ("TERMINAL", "TERMINAL"),  # the client gave up on it, or a person pressed Esc
    "new-prompt": ("SUPERSEDED_HISTORY", "SUPERSEDED"),
}


@pytest.mark.parametrize("ends", sorted(ENDS))
@pytest.mark.parametrize(("client", "suggestions"), PERMISSION_EVENTS, ids=PERMISSION_IDS)
async def test_the_terminal_takes_over_what_nobody_decided_and_turnwise_closes_it(
    server: Server, admin: Client, owner: Owner, client: str, suggestions: bool, ends: str
) -> None:
    state, reason = ENDS[ends]
    agent = Agent(client, folder())
    event = agent.permission_request(suggestions=suggestions)
    hook = await Hook.start(
        server.base_url, owner.runner_token, client, event, wait=1 if ends == "nobody-decides" else 60
    )
    _, pending_id = await waiting_request(admin, agent.cwd, hook)
    if ends == "hook-goes-away":
        hook.proc.terminate()
    elif ends == "new-prompt":
        prompt = await run_hook(server.base_url, owner.runner_token, client, agent.user_prompt_submit())
        assert (prompt.returncode, prompt.stdout, prompt.stderr) == (0, "", "")
    ran = await hook.result()
    assert ran.stdout == ""
    if ends == "nobody-decides":
        assert ran.returncode == 0
        assert "nobody decided in time" in ran.stderr
    # The card is gone (at once, or as soon as the server saw the hook go) and a late answer is stale.
    for _ in range(200):
        if (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["state"] == state:
            break
        await asyncio.sleep(0.05)
    assert (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["state"] == state
    task = await task_of(admin, agent.cwd)
    assert task is not None
    assert [s["activePermission"] for s in task["sessions"]] == [None]
    late = await respond(server, owner, pending_id, "ALLOW")
    assert late == {"__typename": "ClarificationConflict", "reason": reason}


# --- turns, state and the mapping -----------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_sessions_events_run_it_turn_by_turn_and_end_it(
    server: Server, admin: Client, owner: Owner, client: str
) -> None:
    agent = Agent(client, folder())

    async def report(event: dict[str, Any]) -> None:
        ran = await run_hook(server.base_url, owner.runner_token, client, event)
        # Nothing printed: what these events print would reach the model.
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")

    await report(agent.session_start())
    task = await task_of(admin, agent.cwd)
    assert task is not None
    ((session),) = task["sessions"]
    assert session["state"] == "RUNNING"
    await report(agent.user_prompt_submit())
    (turn,) = (await admin.execute(TURNS, {"s": session["id"]}))["sessionTurns"]
    assert turn["completedAt"] is None
    await report(agent.stop())
    (turn,) = (await admin.execute(TURNS, {"s": session["id"]}))["sessionTurns"]
    assert turn["completedAt"] is not None
    await report(agent.session_end())
    task = await task_of(admin, agent.cwd)
    assert task is not None
    assert [s["state"] for s in task["sessions"]] == ["COMPLETED"]


async def test_first_sight_makes_the_folders_task_and_its_later_sessions_share_it(
    server: Server, admin: Client, owner: Owner
) -> None:
    cwd = folder()
    claude, codex = Agent("claude", cwd), Agent("codex", cwd)
    await run_hook(server.base_url, owner.runner_token, "claude", claude.user_prompt_submit())
    task = await task_of(admin, cwd)
    assert task is not None
    assert (task["title"], task["project"]) == (cwd.rsplit("/", 1)[1], cwd)
    await run_hook(server.base_url, owner.runner_token, "codex", codex.session_start())
    later = await task_of(admin, cwd)
    assert later is not None
    assert later["id"] == task["id"]
    assert len(later["sessions"]) == 2
