"""Permission rules through the API against a real server, on SQLite and PostgreSQL: a deny beats an
allow and an ask beats an allow, each automatic decision naming its rule and scope (and keeping it
once the rule is revoked or expired); a TASK rule reaches every session of its task and no other
task, a PROJECT rule every task of its project; an expired rule decides nothing; a Claude Code block
imports whole or not at all and exports back; remembering one of a request's suggestions at a scope
makes that rule; who may add a rule where, and every refusal naming its field with nothing written."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import text

from backend.db.engine import Database
from backend.domain.permissions import input_key
from tests.api.client import Client, GraphQLError
from tests.api.gql import CREATE_SESSION, GRANT, SET_STATE, START, token_for
from tests.dialects import fresh_db
from tests.repository.test_migration_0007 import _downgrade
from tests.servers import ADMIN_TOKEN, Server

CREATE_TASK = "mutation($t: String!, $p: String) { createTask(title: $t, project: $p) { id } }"
RULE = "id pattern behavior scope scopeId sessionId toolName input expiresAt decisions lastDecidedAt"
ADD = f"""mutation($p: String!, $b: RuleBehavior!, $s: RuleScope!, $id: ID, $e: Float) {{
  addPermissionRule(pattern: $p, behavior: $b, scope: $s, scopeId: $id, expiresInSeconds: $e) {{
    {RULE} }} }}"""
IMPORT = f"""mutation($x: JSON!, $s: RuleScope!, $id: ID) {{
  importPermissionRules(settings: $x, scope: $s, scopeId: $id) {{ {RULE} }} }}"""
SETTINGS = "query($s: RuleScope!, $id: ID) { permissionSettings(scope: $s, scopeId: $id) }"
RULES = f"query($s: ID!) {{ permissionRules(sessionId: $s) {{ {RULE} }} }}"
REVOKE = "mutation($r: ID!) { revokePermissionRule(ruleId: $r) }"
SNAPSHOT = "rule { id pattern behavior scope scopeId }"
ASK = f"""subscription($s: ID!, $n: String!, $i: JSON!) {{
  askPermission(sessionId: $s, toolName: $n, input: $i, timeoutSeconds: 5) {{
    __typename
    ... on PermissionAsked {{ request {{ pendingId suggestions {{ pattern label broad warning }} }} }}
    ... on PermissionDecided {{ pendingId decision {{ behavior message auto ruleId {SNAPSHOT} }} }}
  }} }}"""
PERMISSION = (
    f"query($p: ID!) {{ permission(pendingId: $p) {{ state decision {{ behavior auto {SNAPSHOT} }} }} }}"
)
REMEMBER = """mutation($p: ID!, $r: String, $s: RuleScope!) {
  respondToPermission(pendingId: $p, behavior: ALLOW, remember: true, rememberPattern: $r,
                      rememberScope: $s) {
    __typename } }"""


@pytest.fixture
async def user(server: Server, admin: Client) -> AsyncIterator[tuple[str, Client]]:
    user_id, token = await token_for(admin, "user", name=f"dev-{uuid.uuid4().hex[:8]}")
    client = Client(server.base_url, token)
    yield user_id, client
    await client.aclose()


async def new_task(admin: Client, project: str | None = None) -> str:
    return str((await admin.execute(CREATE_TASK, {"t": "rules", "p": project}))["createTask"]["id"])


async def new_session(admin: Client, task_id: str) -> str:
    made = await admin.execute(CREATE_SESSION, {"task": task_id, "p": False})
    session_id = str(made["createSession"]["id"])
    await admin.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
    await admin.execute(START, {"s": session_id})
    return session_id


async def add(
    client: Client, pattern: str, behavior: str, scope: str, scope_id: str | None, **kw: Any
) -> dict[str, Any]:
    variables = {"p": pattern, "b": behavior, "s": scope, "id": scope_id, "e": kw.get("expires")}
    return dict((await client.execute(ADD, variables))["addPermissionRule"])


async def ask(client: Client, session_id: str, command: str, tool: str = "Bash") -> dict[str, Any]:
    """The ask's first outcome (the subscription then ends: a request left asked is detached)."""
    tool_input = {"command": command} if tool == "Bash" else {"file_path": command}
    async with client.subscribe(ASK, {"s": session_id, "n": tool, "i": tool_input}) as sub:
        return dict((await sub.next())["askPermission"])


async def rules_of(client: Client, session_id: str) -> list[dict[str, Any]]:
    return list((await client.execute(RULES, {"s": session_id}))["permissionRules"])


async def refused(client: Client, query: str, variables: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(GraphQLError) as err:
        await client.execute(query, variables)
    (code,) = err.value.codes
    return str(code), str(err.value.errors[0]["message"])


async def test_a_deny_beats_an_allow_and_every_automatic_decision_names_its_rule_and_scope(
    admin: Client,
) -> None:
    task_id = await new_task(admin)
    session_id = await new_session(admin, task_id)
    allow = await add(admin, "Bash", "ALLOW", "TASK", task_id)
    deny = await add(admin, "Bash(rm -rf *)", "DENY", "SESSION", session_id)
    denied = await ask(admin, session_id, "rm -rf build")
    assert denied["__typename"] == "PermissionDecided"
    decision = denied["decision"]
    assert (decision["behavior"], decision["auto"], decision["ruleId"]) == ("DENY", True, deny["id"])
    assert "Bash(rm -rf *)" in decision["message"]
    assert "session" in decision["message"]
    assert decision["rule"] == {
        "id": deny["id"],
        "pattern": "Bash(rm -rf *)",
        "behavior": "DENY",
        "scope": "SESSION",
        "scopeId": session_id,
    }
    # A compound command is denied when any part is: the deny reads every command it runs.
    chained = await ask(admin, session_id, "npm test && rm -rf /")
    assert chained["decision"]["ruleId"] == deny["id"]
    allowed = await ask(admin, session_id, "npm test")
    assert allowed["decision"]["behavior"] == "ALLOW"
    assert allowed["decision"]["rule"]["scope"] == "TASK"
    # In evaluation order, each with what it decided in this session.
    listed = await rules_of(admin, session_id)
    assert [(r["id"], r["decisions"]) for r in listed] == [(deny["id"], 2), (allow["id"], 1)]
    assert [r["sessionId"] for r in listed] == [session_id, None]
    # Revoked, the rule decides nothing more, and the requests it decided still name it.
    assert (await admin.execute(REVOKE, {"r": deny["id"]}))["revokePermissionRule"]
    assert (await ask(admin, session_id, "rm -rf build"))["decision"]["behavior"] == "ALLOW"
    history = (await admin.execute(PERMISSION, {"p": denied["pendingId"]}))["permission"]
    assert history["state"] == "TERMINAL"
    assert history["decision"]["rule"]["pattern"] == "Bash(rm -rf *)"


async def test_an_ask_rule_beats_an_allow_and_asks_a_person(admin: Client) -> None:
    task_id = await new_task(admin)
    session_id = await new_session(admin, task_id)
    await add(admin, "Bash", "ALLOW", "SESSION", session_id)
    await add(admin, "Bash(git push *)", "ASK", "SESSION", session_id)
    asked = await ask(admin, session_id, "git push origin main")
    assert asked["__typename"] == "PermissionAsked"
    assert (await ask(admin, session_id, "git status"))["__typename"] == "PermissionDecided"


async def test_a_task_rule_reaches_every_session_of_its_task_and_no_other_task(admin: Client) -> None:
    task_id = await new_task(admin)
    first, second = await new_session(admin, task_id), await new_session(admin, task_id)
    other = await new_session(admin, await new_task(admin))
    rule = await add(admin, "Bash(make:*)", "ALLOW", "TASK", task_id)
    for session_id in (first, second):
        decided = await ask(admin, session_id, "make test")
        assert decided["decision"]["ruleId"] == rule["id"], session_id
        assert [r["id"] for r in await rules_of(admin, session_id)] == [rule["id"]]
    assert (await ask(admin, other, "make test"))["__typename"] == "PermissionAsked"
    assert await rules_of(admin, other) == []


async def test_a_project_rule_reaches_every_task_of_its_project(admin: Client) -> None:
    project = f"/src/shop-{uuid.uuid4().hex[:8]}"
    here = await new_session(admin, await new_task(admin, project))
    there = await new_session(admin, await new_task(admin, project))
    elsewhere = await new_session(admin, await new_task(admin, project + "-other"))
    nowhere = await new_session(admin, await new_task(admin))
    rule = await add(admin, "Read(src/**)", "ALLOW", "PROJECT", project)
    assert rule["scopeId"] == project
    # Relative paths are the project's: src/** is <project>/src/**.
    decided = await ask(admin, there, f"{project}/src/app.py", tool="Read")
    assert decided["decision"]["rule"]["scope"] == "PROJECT"
    assert (await ask(admin, here, f"{project}/README.md", tool="Read"))["__typename"] == "PermissionAsked"
    for session_id in (elsewhere, nowhere):
        assert (await ask(admin, session_id, f"{project}/src/app.py", tool="Read"))[
            "__typename"
        ] == "PermissionAsked"
    assert [r["id"] for r in await rules_of(admin, here)] == [rule["id"]]


async def test_an_expired_rule_decides_nothing_and_keeps_its_history(admin: Client) -> None:
    session_id = await new_session(admin, await new_task(admin))
    rule = await add(admin, "Bash(npm test)", "ALLOW", "SESSION", session_id, expires=1.5)
    assert rule["expiresAt"] is not None
    decided = await ask(admin, session_id, "npm test")
    assert decided["decision"]["ruleId"] == rule["id"]
    await asyncio.sleep(1.6)
    assert (await ask(admin, session_id, "npm test"))["__typename"] == "PermissionAsked"
    assert await rules_of(admin, session_id) == []  # expired rules are not listed
    history = (await admin.execute(PERMISSION, {"p": decided["pendingId"]}))["permission"]
    assert history["decision"]["rule"]["id"] == rule["id"]


BLOCK = {
    "permissions": {
        "allow": ["Bash(npm run test:*)", "Read(src/**)", "mcp__github__get_issue"],
        "ask": ["Bash(git push *)"],
        "deny": ["Bash(rm -rf *)", "Read(./.env)", "WebFetch(domain:pastebin.com)"],
        "defaultMode": "acceptEdits",
    }
}


async def test_a_settings_block_imports_whole_and_exports_back(admin: Client) -> None:
    task_id = await new_task(admin)
    session_id = await new_session(admin, task_id)
    imported = (await admin.execute(IMPORT, {"x": BLOCK, "s": "TASK", "id": task_id}))[
        "importPermissionRules"
    ]
    assert sorted(r["pattern"] for r in imported) == sorted(
        p for k in ("allow", "ask", "deny") for p in BLOCK["permissions"][k]
    )
    assert {r["scope"] for r in imported} == {"TASK"}
    exported = (await admin.execute(SETTINGS, {"s": "TASK", "id": task_id}))["permissionSettings"]
    assert exported == {k: BLOCK["permissions"][k] for k in ("allow", "ask", "deny")}
    # Imported twice, still one rule each.
    await admin.execute(IMPORT, {"x": BLOCK["permissions"], "s": "TASK", "id": task_id})
    listed = await rules_of(admin, session_id)
    assert len(listed) == len(imported)
    assert [r["behavior"] for r in listed] == ["DENY"] * 3 + ["ASK"] + ["ALLOW"] * 3
    assert (await ask(admin, session_id, "npm run test -- --watch"))["decision"]["behavior"] == "ALLOW"
    assert (await ask(admin, session_id, "rm -rf node_modules"))["decision"]["behavior"] == "DENY"


async def test_a_partly_invalid_block_is_refused_by_index_and_writes_nothing(admin: Client) -> None:
    task_id = await new_task(admin)
    session_id = await new_session(admin, task_id)
    await add(admin, "Bash(ls)", "ALLOW", "TASK", task_id)
    before = (await admin.execute(SETTINGS, {"s": "TASK", "id": task_id}))["permissionSettings"]
    bad = {"allow": ["Bash(npm test)", "Bash(unclosed", "Edit(src/**)"], "deny": ["Grep(secret)"]}
    code, message = await refused(admin, IMPORT, {"x": bad, "s": "TASK", "id": task_id})
    assert code == "BAD_USER_INPUT"
    assert message.startswith("settings: ")
    assert "allow[1]" in message
    assert "deny[0]" in message
    assert "allow[0]" not in message
    assert (await admin.execute(SETTINGS, {"s": "TASK", "id": task_id}))["permissionSettings"] == before
    assert [r["pattern"] for r in await rules_of(admin, session_id)] == ["Bash(ls)"]


async def test_remembering_a_suggestion_at_a_scope_makes_that_rule(admin: Client) -> None:
    task_id = await new_task(admin)
    session_id, sibling = await new_session(admin, task_id), await new_session(admin, task_id)
    asked = await ask(admin, session_id, "git push origin main")
    request = asked["request"]
    suggestions = request["suggestions"]
    assert [s["pattern"] for s in suggestions] == ["Bash(git push origin main)", "Bash(git push:*)", "Bash"]
    assert [s["broad"] for s in suggestions] == [False, False, True]
    assert "rm -rf" in suggestions[-1]["warning"]
    pending_id = request["pendingId"]
    # A pattern that does not match what is allowed is refused, naming it; nothing is written.
    code, message = await refused(admin, REMEMBER, {"p": pending_id, "r": "Bash(npm test:*)", "s": "TASK"})
    assert (code, message.split(":")[0]) == ("BAD_USER_INPUT", "rememberPattern")
    assert (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["decision"] is None
    done = await admin.execute(REMEMBER, {"p": pending_id, "r": "Bash(git push:*)", "s": "TASK"})
    assert done["respondToPermission"]["__typename"] == "PermissionResponded"
    decided = await ask(admin, sibling, "git push --tags")
    assert decided["decision"]["rule"]["pattern"] == "Bash(git push:*)"
    assert decided["decision"]["rule"]["scope"] == "TASK"


BAD_RULES: list[tuple[dict[str, Any], str]] = [
    ({"p": "Bash(unclosed"}, "pattern"),
    ({"p": "   "}, "pattern"),
    ({"p": "Grep(secret)"}, "pattern"),
    ({"s": "SESSION", "id": None}, "scopeId"),
    ({"s": "GLOBAL", "id": "x"}, "scopeId"),
    ({"e": 0}, "expiresInSeconds"),
    ({"e": -5}, "expiresInSeconds"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_RULES, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_RULES)])
async def test_a_bad_rule_is_refused_naming_the_field_and_nothing_is_written(
    admin: Client, bad: dict[str, Any], field: str
) -> None:
    session_id = await new_session(admin, await new_task(admin))
    variables = {"p": "Bash(ls)", "b": "ALLOW", "s": "SESSION", "id": session_id, "e": None, **bad}
    code, message = await refused(admin, ADD, variables)
    assert (code, message.split(":")[0]) == ("BAD_USER_INPUT", field), message
    assert await rules_of(admin, session_id) == []


async def test_a_person_adds_rules_for_their_own_tasks_and_only_an_admin_adds_global_ones(
    admin: Client, user: tuple[str, Client]
) -> None:
    user_id, person = user
    project = f"/src/mine-{uuid.uuid4().hex[:8]}"
    mine = await new_task(admin, project)
    await admin.execute(GRANT, {"u": user_id, "t": mine})
    session_id = await new_session(admin, mine)
    theirs = await new_task(admin, f"/src/theirs-{uuid.uuid4().hex[:8]}")
    for scope, scope_id in (("SESSION", session_id), ("TASK", mine), ("PROJECT", project)):
        rule = await add(person, "Bash(ls)", "ALLOW", scope, scope_id)
        assert (rule["scope"], rule["scopeId"]) == (scope, scope_id)
    assert len(await rules_of(person, session_id)) == 3
    code, message = await refused(person, ADD, {"p": "Bash", "b": "ALLOW", "s": "TASK", "id": theirs})
    assert (code, theirs in message) == ("NOT_FOUND", True)
    code, _ = await refused(person, ADD, {"p": "Bash", "b": "ALLOW", "s": "PROJECT", "id": "/src/theirs"})
    assert code == "NOT_FOUND"
    code, _ = await refused(person, ADD, {"p": "mcp__nobody", "b": "DENY", "s": "GLOBAL", "id": None})
    assert code == "FORBIDDEN"
    # An admin's GLOBAL rule reaches every session (a tool no other test asks for).
    tool = f"mcp__rules{uuid.uuid4().hex[:6]}"
    everywhere = await add(admin, tool, "DENY", "GLOBAL", None)
    assert everywhere["scopeId"] is None
    assert everywhere["id"] in [r["id"] for r in await rules_of(person, session_id)]
    exported = (await person.execute(SETTINGS, {"s": "GLOBAL", "id": None}))["permissionSettings"]
    assert tool in exported["deny"]
    code, _ = await refused(person, REVOKE, {"r": everywhere["id"]})
    assert code == "FORBIDDEN"
    assert (await admin.execute(REVOKE, {"r": everywhere["id"]}))["revokePermissionRule"]


OLD_RULES = [  # (rule id, session, tool, input; None: any input), as revision 0010 stored them
    ("cmd", "s1", "Bash", {"command": "npm test"}),
    ("read", "s1", "Read", {"file_path": "/etc/hosts"}),
    ("any", "s2", "Bash", None),
]


async def _at_0010_with_old_rules(url: str) -> None:
    db = Database(url)
    try:
        await _downgrade(db, "0010")
        json_input = "CAST(:i AS JSONB)" if not db.is_sqlite else ":i"
        async with db.engine.begin() as conn:
            now = dt.datetime.now(dt.UTC)
            await conn.execute(
                text(
                    "INSERT INTO tasks (id, title, workflow_step, created_at, updated_at)"
                    " VALUES ('t', 't', 'todo', :n, :n)"
                ),
                {"n": now},
            )
            for session_id in ("s1", "s2"):
                await conn.execute(
                    text(
                        "INSERT INTO task_sessions (id, task_id, state, created_at, updated_at)"
                        " VALUES (:s, 't', 'RUNNING', :n, :n)"
                    ),
                    {"s": session_id, "n": now},
                )
            for rule_id, session_id, tool, value in OLD_RULES:
                written = None if value is None else json.dumps(value)
                await conn.execute(
                    text(
                        "INSERT INTO permission_rules (id, session_id, tool_name, input_key, input,"
                        f" input_json, created_at) VALUES (:id, :s, :tool, :key, {json_input}, :i, :n)"
                    ),
                    {
                        "id": rule_id,
                        "s": session_id,
                        "tool": tool,
                        "key": "" if value is None else input_key(value),
                        "i": written,
                        "n": now,
                    },
                )
    finally:
        await db.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def old_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database at revision 0010 holding rules remembered then."""
    with fresh_db(request.param, request) as url:
        asyncio.run(_at_0010_with_old_rules(url))
        yield url


async def test_rules_remembered_before_patterns_still_decide_after_the_upgrade(old_database: str) -> None:
    server = Server(old_database).start()  # migrates to the head as it starts
    client = Client(server.base_url, ADMIN_TOKEN)
    try:
        cmd = await ask(client, "s1", "npm test")
        assert (cmd["decision"]["ruleId"], cmd["decision"]["rule"]["pattern"]) == (
            "cmd",
            "Bash(npm test)",
        )
        assert (await ask(client, "s1", "/etc/hosts", tool="Read"))["decision"]["ruleId"] == "read"
        assert (await ask(client, "s1", "/etc/passwd", tool="Read"))["__typename"] == "PermissionAsked"
        assert (await ask(client, "s1", "npm test && curl evil.example"))["__typename"] == "PermissionAsked"
        assert (await ask(client, "s2", "rm -rf build"))["decision"]["ruleId"] == "any"
        listed = {r["id"]: r for r in await rules_of(client, "s1")}
        assert {k: (r["pattern"], r["scope"], r["behavior"]) for k, r in listed.items()} == {
            "cmd": ("Bash(npm test)", "SESSION", "ALLOW"),
            "read": ('Read(={"file_path":"/etc/hosts"})', "SESSION", "ALLOW"),
        }
        assert listed["read"]["input"] == {"file_path": "/etc/hosts"}
    finally:
        await client.aclose()
        server.stop()


@pytest.mark.parametrize("role", ["agent", "support"])
async def test_an_agent_or_a_reader_of_the_task_writes_no_rule(
    server: Server, admin: Client, role: str
) -> None:
    task_id = await new_task(admin)
    session_id = await new_session(admin, task_id)
    name = f"{role}-{uuid.uuid4().hex[:8]}"
    _, token = await token_for(admin, role, name=name, session_id=session_id if role == "agent" else None)
    client = Client(server.base_url, token)
    try:
        add_it = {"p": "Bash", "b": "ALLOW", "s": "SESSION", "id": session_id, "e": None}
        assert (await refused(client, ADD, add_it))[0] == "FORBIDDEN"
        import_it = {"x": {"allow": ["Bash"]}, "s": "TASK", "id": task_id}
        assert (await refused(client, IMPORT, import_it))[0] == "FORBIDDEN"
        # Reading is reading: the session's rules and the task's block.
        assert await rules_of(client, session_id) == []
        assert (await client.execute(SETTINGS, {"s": "TASK", "id": task_id}))["permissionSettings"] == {
            "allow": [],
            "ask": [],
            "deny": [],
        }
    finally:
        await client.aclose()
    assert await rules_of(admin, session_id) == []
