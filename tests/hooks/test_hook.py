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


@pytest.mark.parametrize(("client", "suggestions"), PERMISSION_EVENTS, ids=PERMISSION_IDS)
async def test_a_person_allows_with_an_edit_and_the_hook_prints_it_as_the_client_reads_it(
    server: Server, admin: Client, owner: Owner, client: str, suggestions: bool
) -> None:
    agent = Agent(client, folder())
    hook = await Hook.start(
        server.base_url,
        owner.runner_token,
        client,
        agent.permission_request(suggestions=suggestions),
        wait=60,
    )
    _, pending_id = await waiting_request(admin, agent.cwd, hook)
    edited = {**BASH, "command": "npm run migrate -- --dry-run"}
    assert (await respond(server, owner, pending_id, "ALLOW", updated=edited))["__typename"] == (
        "PermissionResponded"
    )
    ran = await hook.result()
    assert (ran.returncode, ran.stderr) == (0, "")
    if client == "claude":
        assert decision(ran.printed) == {"behavior": "allow", "updatedInput": edited}
    else:
        # Codex fails closed on updatedInput: the agent is told what was allowed, and runs that.
        denied = decision(ran.printed)
        assert denied["behavior"] == "deny"
        assert "npm run migrate -- --dry-run" in denied["message"]


async def test_codex_is_allowed_without_an_input_when_the_person_allows_it_as_asked(
    server: Server, admin: Client, owner: Owner
) -> None:
    agent = Agent("codex", folder())
    hook = await Hook.start(server.base_url, owner.runner_token, "codex", agent.permission_request(), wait=60)
    _, pending_id = await waiting_request(admin, agent.cwd, hook)
    await respond(server, owner, pending_id, "ALLOW")
    ran = await hook.result()
    assert ran.returncode == 0
    assert decision(ran.printed) == {"behavior": "allow"}


@pytest.mark.parametrize(("client", "suggestions"), PERMISSION_EVENTS, ids=PERMISSION_IDS)
async def test_a_person_denies_with_a_reason_the_agent_is_given(
    server: Server, admin: Client, owner: Owner, client: str, suggestions: bool
) -> None:
    agent = Agent(client, folder())
    hook = await Hook.start(
        server.base_url,
        owner.runner_token,
        client,
        agent.permission_request(suggestions=suggestions),
        wait=60,
    )
    _, pending_id = await waiting_request(admin, agent.cwd, hook)
    await respond(server, owner, pending_id, "DENY", message="not on staging today")
    ran = await hook.result()
    assert (ran.returncode, ran.stderr) == (0, "")
    assert decision(ran.printed) == {"behavior": "deny", "message": "not on staging today"}


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


@pytest.mark.parametrize(("client", "suggestions"), PERMISSION_EVENTS, ids=PERMISSION_IDS)
async def test_nobody_deciding_in_time_prints_nothing_and_closes_the_request(
    server: Server, admin: Client, owner: Owner, client: str, suggestions: bool
) -> None:
    agent = Agent(client, folder())
    hook = await Hook.start(
        server.base_url, owner.runner_token, client, agent.permission_request(suggestions=suggestions), wait=1
    )
    _, pending_id = await waiting_request(admin, agent.cwd, hook)
    ran = await hook.result()
    assert (ran.returncode, ran.stdout) == (0, "")
    assert "nobody decided in time" in ran.stderr
    # The terminal owns it now: the card is gone and a late answer is stale.
    assert (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["state"] == "TERMINAL"
    task = await task_of(admin, agent.cwd)
    assert task is not None
    assert [s["activePermission"] for s in task["sessions"]] == [None]
    late = await respond(server, owner, pending_id, "ALLOW")
    assert late == {"__typename": "ClarificationConflict", "reason": "TERMINAL"}


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_hook_that_goes_away_mid_wait_closes_its_request(
    server: Server, admin: Client, owner: Owner, client: str
) -> None:
    agent = Agent(client, folder())
    hook = await Hook.start(server.base_url, owner.runner_token, client, agent.permission_request(), wait=60)
    _, pending_id = await waiting_request(admin, agent.cwd, hook)
    hook.proc.terminate()  # the client gave up on it, or a person pressed Esc
    await hook.result()
    for _ in range(200):
        state = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["state"]
        if state == "TERMINAL":
            break
        await asyncio.sleep(0.05)
    assert state == "TERMINAL"
    late = await respond(server, owner, pending_id, "ALLOW")
    assert late == {"__typename": "ClarificationConflict", "reason": "TERMINAL"}


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_new_prompt_supersedes_the_pending_request(
    server: Server, admin: Client, owner: Owner, client: str
) -> None:
    agent = Agent(client, folder())
    waiting = await Hook.start(
        server.base_url, owner.runner_token, client, agent.permission_request(), wait=60
    )
    _, pending_id = await waiting_request(admin, agent.cwd, waiting)
    prompt = await run_hook(server.base_url, owner.runner_token, client, agent.user_prompt_submit())
    assert (prompt.returncode, prompt.stdout, prompt.stderr) == (0, "", "")
    ran = await waiting.result()
    assert (ran.returncode, ran.stdout) == (0, "")
    assert (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["state"] == "SUPERSEDED_HISTORY"
    task = await task_of(admin, agent.cwd)
    assert task is not None
    assert [s["activePermission"] for s in task["sessions"]] == [None]
    late = await respond(server, owner, pending_id, "ALLOW")
    assert late == {"__typename": "ClarificationConflict", "reason": "SUPERSEDED"}


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
