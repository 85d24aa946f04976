"""askPermission and respondToPermission over GraphQL against a real server, on SQLite and PostgreSQL:
bad requests are refused naming the field and write nothing; an edited ALLOW is remembered only as a
rule of any input; and the rule that decided a request stays readable, to support staff too, after
it is revoked."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select, update

from backend.db.engine import Database
from backend.db.tables import task_session_messages
from tests.api.client import Client, GraphQLError
from tests.api.gql import running_session, token_for
from tests.api.kinds import API_PERMISSION, BASH
from tests.servers import Server

ASK = """subscription($s: ID!, $n: String!, $i: JSON!, $u: String, $c: String, $t: Float) {
  askPermission(sessionId: $s, toolName: $n, input: $i, toolUseId: $u, context: $c, timeoutSeconds: $t) {
    __typename
    ... on PermissionAsked { request { pendingId } }
    ... on PermissionDecided { pendingId decision { behavior auto ruleId rule { id toolName anyInput } } }
  } }"""
ASK_WITHOUT_INPUT = """subscription($s: ID!) {
  askPermission(sessionId: $s, toolName: "Bash") { __typename } }"""
RESPOND = """mutation($p: ID!, $i: JSON, $r: Boolean!, $any: Boolean!) {
  respondToPermission(pendingId: $p, behavior: ALLOW, updatedInput: $i, remember: $r,
                      rememberAnyInput: $any) {
    __typename
    ... on PermissionResponded { request { decision { behavior updatedInput remember } } } } }"""
DECISION = "decision { behavior updatedInput auto ruleId rule { id toolName anyInput } }"
PERMISSION = f"query($p: ID!) {{ permission(pendingId: $p) {{ state {DECISION} }} }}"
RULES = "query($s: ID!) { permissionRules(sessionId: $s) { id toolName input } }"
REVOKE = "mutation($r: ID!) { revokePermissionRule(ruleId: $r) }"
# Everything an ask or a decision could write, as clients read it.
SNAPSHOT = """query($t: ID!, $s: ID!) {
  taskSessions(taskId: $t) { state pendingAction pendingActionRevision { epoch sequence }
                             activePermission { pendingId state decision { behavior } } }
  sessionMessages(sessionId: $s) { id kind }
  sessionTurns(sessionId: $s) { id }
  permissionRules(sessionId: $s) { id } }"""
EDITED = {"command": "alembic upgrade head --sql", "description": "dry run"}


async def snapshot(admin: Client, task_id: str, session_id: str) -> dict[str, Any]:
    return await admin.execute(SNAPSHOT, {"t": task_id, "s": session_id})


async def respond(admin: Client, pending_id: str, **kw: Any) -> dict[str, Any]:
    variables = {
        "p": pending_id,
        "i": kw.get("updated_input"),
        "r": kw.get("remember", False),
        "any": kw.get("any_input", False),
    }
    return dict((await admin.execute(RESPOND, variables))["respondToPermission"])


async def ask_once(client: Client, variables: dict[str, Any]) -> dict[str, Any]:
    """The first outcome of an askPermission (the subscription then ends, detaching a live ask)."""
    async with client.subscribe(ASK, variables) as sub:
        return dict((await sub.next())["askPermission"])


BAD_ASKS = [
    ({"n": ""}, "toolName"),
    ({"n": "   "}, "toolName"),
    ({"n": "Bash\nrm -rf /"}, "toolName"),
    ({"n": "T" * 201}, "toolName"),
    ({"u": ""}, "toolUseId"),
    ({"u": "u" * 201}, "toolUseId"),
    ({"u": "toolu_1\u2028toolu_2"}, "toolUseId"),
    ({"c": "c" * 4001}, "context"),
    ({"i": {"command": "x" * 64_001}}, "input"),
    # A tool takes its arguments by name: any other JSON is refused (null never passes `JSON!`).
    ({"i": "rm -rf /"}, "input"),
    ({"i": ["rm", "-rf", "/"]}, "input"),
    ({"i": 12.5}, "input"),
    ({"i": 2**70 + 1}, "input"),
    ({"i": True}, "input"),
    ({"t": 0}, "timeoutSeconds"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_ASKS, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_ASKS)])
async def test_a_bad_permission_request_is_refused_naming_the_field_and_writes_nothing(
    admin: Client, bad: dict[str, Any], field: str
) -> None:
    task_id, session_id = await running_session(admin, title=f"bad ask {field}")
    before = await snapshot(admin, task_id, session_id)
    variables = {"s": session_id, "n": "Bash", "i": BASH, "u": "toolu_1", "c": None, "t": 5, **bad}
    async with admin.subscribe(ASK, variables) as sub:
        with pytest.raises(GraphQLError) as err:
            await sub.next()
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert err.value.errors[0]["message"].startswith(f"{field}:"), err.value.errors
    assert await snapshot(admin, task_id, session_id) == before


async def test_a_permission_request_without_its_input_is_refused_naming_it_and_writes_nothing(
    admin: Client,
) -> None:
    task_id, session_id = await running_session(admin, title="ask without input")
    before = await snapshot(admin, task_id, session_id)
    async with admin.subscribe(ASK_WITHOUT_INPUT, {"s": session_id}) as sub:
        with pytest.raises(GraphQLError) as err:
            await sub.next()
    assert err.value.codes == ["GRAPHQL_VALIDATION_FAILED"]
    assert "askPermission(input:)" in err.value.errors[0]["message"]
    assert await snapshot(admin, task_id, session_id) == before


async def test_an_edited_allow_is_not_remembered_for_the_input_asked_but_may_be_for_any_input(
    admin: Client,
) -> None:
    task_id, session_id = await running_session(admin, title="edited and remembered")
    pending_id = await API_PERMISSION.detached(admin, session_id)
    before = await snapshot(admin, task_id, session_id)
    with pytest.raises(GraphQLError) as err:
        await respond(admin, pending_id, updated_input=EDITED, remember=True)
    assert err.value.codes == ["BAD_USER_INPUT"]
    message = err.value.errors[0]["message"]
    assert message.startswith("remember:"), message
    assert "updatedInput" in message
    assert await snapshot(admin, task_id, session_id) == before
    assert (await admin.execute(PERMISSION, {"p": pending_id}))["permission"] == {
        "state": "ACTIVE_DETACHED",
        "decision": None,
    }
    # A rule of any input of the tool says what the person chose: it takes the edit.
    allowed = await respond(admin, pending_id, updated_input=EDITED, remember=True, any_input=True)
    assert allowed["__typename"] == "PermissionResponded", allowed
    assert allowed["request"]["decision"] == {"behavior": "ALLOW", "updatedInput": EDITED, "remember": True}
    rules = (await admin.execute(RULES, {"s": session_id}))["permissionRules"]
    assert [(r["toolName"], r["input"]) for r in rules] == [("Bash", None)]


async def test_an_allow_whose_input_is_the_one_asked_is_remembered_for_that_input(admin: Client) -> None:
    _, session_id = await running_session(admin, title="unedited and remembered")
    pending_id = await API_PERMISSION.detached(admin, session_id)
    allowed = await respond(admin, pending_id, updated_input=dict(BASH), remember=True)
    assert allowed["__typename"] == "PermissionResponded", allowed
    rules = (await admin.execute(RULES, {"s": session_id}))["permissionRules"]
    assert [(r["toolName"], r["input"]) for r in rules] == [("Bash", BASH)]


@pytest.mark.parametrize("any_input", [False, True], ids=["exact-input", "any-input"])
async def test_support_staff_see_which_rule_allowed_a_request_even_after_it_is_revoked(
    server: Server, admin: Client, any_input: bool
) -> None:
    _, session_id = await running_session(admin, title="which rule")
    first = await API_PERMISSION.detached(admin, session_id)
    await respond(admin, first, remember=True, any_input=any_input)
    (rule,) = (await admin.execute(RULES, {"s": session_id}))["permissionRules"]
    decided = await ask_once(admin, {"s": session_id, "n": "Bash", "i": BASH, "t": 5})
    assert decided["__typename"] == "PermissionDecided", decided
    expected = {
        "behavior": "ALLOW",
        "auto": True,
        "ruleId": rule["id"],
        "rule": {"id": rule["id"], "toolName": "Bash", "anyInput": any_input},
    }
    assert decided["decision"] == expected
    assert (await admin.execute(REVOKE, {"r": rule["id"]}))["revokePermissionRule"] is True
    _, support_token = await token_for(admin, "support", name=f"support-{uuid.uuid4().hex[:8]}")
    support = Client(server.base_url, support_token)
    try:
        by_rule = (await support.execute(PERMISSION, {"p": decided["pendingId"]}))["permission"]
        by_person = (await support.execute(PERMISSION, {"p": first}))["permission"]
    finally:
        await support.aclose()
    assert by_rule["state"] == "TERMINAL"
    assert by_rule["decision"] == {**expected, "updatedInput": BASH}
    # A person's decision names no rule (even one that created a rule).
    person = by_person["decision"]
    assert (person["auto"], person["ruleId"], person["rule"]) == (False, None, None)


# A request's input as servers before inputs had to be objects may have stored it: the value itself
# (older rows), or its JSON text.
STORED_INPUTS = {
    "null": ({"input": None}, None),
    "string": ({"input": "rm -rf /"}, "rm -rf /"),
    "array": ({"input": ["rm", "-rf", "/"]}, ["rm", "-rf", "/"]),
    "null as JSON text": ({"input_json": "null"}, None),
    "number as JSON text": ({"input_json": "7"}, 7),
    "text that is not JSON": ({"input_json": "{rm -rf"}, "{rm -rf"),
}
READ_STORED = """query($p: ID!, $t: ID!) {
  permission(pendingId: $p) { input }
  taskSessions(taskId: $t) { activePermission { pendingId input } } }"""


async def store_tool_input(url: str, pending_id: str, stored: dict[str, Any]) -> None:
    """Rewrite a request's stored input as an older server would have written it."""
    messages = task_session_messages
    db = Database(url)
    try:
        async with db.write() as conn:
            row = (
                await conn.execute(
                    select(messages.c.id, messages.c.metadata).where(messages.c.pending_id == pending_id)
                )
            ).one()
            metadata = dict(row.metadata)
            request = {k: v for k, v in metadata["permission"].items() if k not in ("input", "input_json")}
            metadata["permission"] = {**request, **stored}
            await conn.execute(update(messages).where(messages.c.id == row.id).values(metadata=metadata))
    finally:
        await db.dispose()


@pytest.mark.parametrize(("stored", "value"), list(STORED_INPUTS.values()), ids=list(STORED_INPUTS))
async def test_a_stored_request_whose_input_is_no_object_reads_back_and_is_allowed_only_with_one(
    server: Server, admin: Client, stored: dict[str, Any], value: Any
) -> None:
    task_id, session_id = await running_session(admin, title="stored input")
    pending_id = await API_PERMISSION.detached(admin, session_id)
    await store_tool_input(server.database_url, pending_id, stored)
    shown = {"value": value}
    read = await admin.execute(READ_STORED, {"p": pending_id, "t": task_id})
    assert read == {
        "permission": {"input": shown},
        "taskSessions": [{"activePermission": {"pendingId": pending_id, "input": shown}}],
    }
    # Allowed as it is, the agent would be handed something other than an object to run.
    before = await snapshot(admin, task_id, session_id)
    with pytest.raises(GraphQLError) as err:
        await respond(admin, pending_id)
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert err.value.errors[0]["message"].startswith("updatedInput: is needed to allow this request")
    assert await snapshot(admin, task_id, session_id) == before
    allowed = await respond(admin, pending_id, updated_input=EDITED)
    assert allowed["request"]["decision"] == {"behavior": "ALLOW", "updatedInput": EDITED, "remember": False}
