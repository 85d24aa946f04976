"""API fuzzing against a real `turnwise serve` over HTTP: generated documents plus hostile inputs.

Generated documents come from schema.graphql through hypothesis-graphql (valid ones, and ones with
one schema violation each); hostile inputs are written by hand (huge strings, deep nesting, wrong
types, unicode edge cases, ids of other users' tasks). Every response must be a well-formed GraphQL
result: JSON with data and/or errors, never a 5xx, every error with a code, an INTERNAL error always
with an errorId; and a rejected mutation changes no stored row (a snapshot of every table that a
request could write is compared before and after).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import NameNode, ObjectFieldNode, ValueNode, build_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_graphql import Mode, mutations, nodes, queries
from sqlalchemy import select

from backend.db import tables
from backend.db.engine import Database
from tests.api.client import Client
from tests.api.gql import CREATE_SESSION, CREATE_TASK, GRANT, POST, SET_STATE, START, token_for
from tests.dialects import served
from tests.servers import ADMIN_TOKEN, Server

SCHEMA = (Path(__file__).resolve().parents[2] / "schema.graphql").read_text()
# Every table a request can write; not the epoch/heartbeat table or runner leases, which the server
# process itself refreshes on a timer.
SNAPSHOT = [
    tables.tasks,
    tables.task_sessions,
    tables.task_session_turns,
    tables.task_session_messages,
    tables.task_status_summaries,
    tables.users,
    tables.api_tokens,
    tables.task_grants,
]
ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: 0.2) {
    __typename ... on ClarificationAsked { bundle { pendingId } } } }"""
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!, $r: Boolean!) {
  respondToClarification(pendingId: $p, answers: $a, rejected: $r) { __typename } }"""
TASK = "query($id: ID!) { task(id: $id) { id title } }"
CREATE_TASK_TITLE = "mutation($t: String!) { createTask(title: $t) { id title } }"


async def snapshot(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with db.read() as conn:
        for table in SNAPSHOT:
            rows = await conn.execute(select(table).order_by(*table.primary_key.columns))
            out[table.name] = [tuple(r) for r in rows]
    return out


def check_result(response: httpx.Response) -> dict[str, Any] | None:
    """The response is a well-formed GraphQL result (a body that is no GraphQL request at all gets a
    4xx with a GraphQL-shaped error); returns the parsed body."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    body = response.json()  # every answer, even to a body that is no GraphQL request, is JSON
    assert isinstance(body, dict), body
    assert set(body) <= {"data", "errors", "extensions"}, body
    assert {"data", "errors"} & set(body), body
    for error in body.get("errors") or []:
        assert isinstance(error.get("message"), str), error
        code = (error.get("extensions") or {}).get("code")
        assert isinstance(code, str), f"an error without a code: {error}"
        assert code, f"an error without a code: {error}"
        if code == "INTERNAL":
            assert (error.get("extensions") or {}).get("errorId"), f"INTERNAL without errorId: {error}"
        assert "Traceback" not in error["message"], error
    return body


def rejected(body: dict[str, Any] | None) -> bool:
    if body is None:
        return True
    data = body.get("data")
    return bool(body.get("errors")) and (data is None or all(v is None for v in data.values()))


# A line the server logged at ERROR (the documented format: time, level, logger, message).
ERROR_LINE = re.compile(r"^\d{4}-\d\d-\d\d \S+ ERROR ", re.MULTILINE)


def client_input_faults(log: str) -> list[str]:
    """What a fuzz run must never leave in the server's log: a traceback or a line at ERROR. Every
    request here is a client's input, so each would be the server blaming itself for one."""
    lines = log.splitlines()
    return [line for line in lines if "Traceback" in line or ERROR_LINE.match(line)]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fuzz_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with served(request.param, request) as srv:  # PostgreSQL skips or fails when unreachable
        yield srv
    faults = client_input_faults(srv.log_path.read_text(errors="replace"))
    assert faults == [], "the fuzz run left tracebacks or ERROR lines in the server's log:\n" + "\n".join(
        faults[:20]
    )


# --- generated documents ------------------------------------------------------------------------


class SyncProbe:
    """Sync HTTP and snapshots for Hypothesis tests (which cannot await): one loop, one database."""

    def __init__(self, server: Server) -> None:
        self.loop = asyncio.new_event_loop()
        self.db = Database(server.database_url)
        self.http = httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
        )

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        return self.loop.run_until_complete(snapshot(self.db))

    def close(self) -> None:
        self.http.close()
        self.loop.run_until_complete(self.db.dispose())
        self.loop.close()


@pytest.fixture(scope="module")
def probe(fuzz_server: Server) -> Iterator[SyncProbe]:
    if "sqlite" not in fuzz_server.database_url:
        pytest.skip("generated documents run once, on SQLite; the hostile inputs run on both dialects")
    p = SyncProbe(fuzz_server)
    # Something to find: a task with a session, an open turn and a message.
    p.http.post("/graphql", json={"query": 'mutation { createTask(title: "seed") { id } }'})
    yield p
    p.close()


GENERATED = settings(
    max_examples=120,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)


def _json_node(value: Any) -> ValueNode:
    """A JSON value as the GraphQL literal a client would write for the JSON scalar."""
    if isinstance(value, bool):
        return nodes.Boolean(value)
    if isinstance(value, int):
        return nodes.Int(value)
    if isinstance(value, str):
        return nodes.String(value)
    if isinstance(value, list):
        return nodes.List([_json_node(v) for v in value])
    fields = [ObjectFieldNode(name=NameNode(value=k), value=_json_node(v)) for k, v in value.items()]
    return nodes.Object(fields)


# JSON arguments (a tool's input, a rules block): objects, lists and scalars, keys a rules block uses.
JSON_VALUES = st.recursive(
    st.booleans() | st.integers(-5, 5) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["allow", "ask", "deny", "command", "x"]), inner, max_size=3)
    ),
    max_leaves=6,
)
CUSTOM_SCALARS = {"JSON": JSON_VALUES.map(_json_node)}
_mutation_type = build_schema(SCHEMA).mutation_type
assert _mutation_type is not None
MUTATION_FIELDS = sorted(_mutation_type.fields)


@GENERATED
@given(
    document=st.one_of(
        queries(SCHEMA, mode=Mode.POSITIVE, custom_scalars=CUSTOM_SCALARS),
        queries(SCHEMA, mode=Mode.NEGATIVE, allow_x00=False, custom_scalars=CUSTOM_SCALARS),
    )
)
def test_generated_queries_always_get_a_well_formed_result(probe: SyncProbe, document: str) -> None:
    check_result(probe.http.post("/graphql", json={"query": document}))


@GENERATED
@given(
    data=st.data(),
    field=st.sampled_from(MUTATION_FIELDS),
    mode=st.sampled_from([Mode.POSITIVE, Mode.NEGATIVE]),
)
def test_generated_mutations_are_well_formed_and_a_rejected_one_changes_nothing(
    probe: SyncProbe, data: st.DataObject, field: str, mode: Mode
) -> None:
    # One root field per document: a rejected document then means a rejected write.
    document = data.draw(
        mutations(SCHEMA, fields=[field], mode=mode, allow_x00=False, custom_scalars=CUSTOM_SCALARS)
    )
    before = probe.snapshot()
    body = check_result(probe.http.post("/graphql", json={"query": document}))
    if rejected(body):
        assert probe.snapshot() == before, f"a rejected mutation changed stored rows: {document}"


# --- hostile inputs -----------------------------------------------------------------------------


class World:
    """Two tasks: `mine` granted to `user`, `theirs` not, each with a session, a turn, a message, and
    (theirs) a detached clarification; plus clients for the admin and the user."""

    admin: Client
    user: Client
    user_id: str
    mine: tuple[str, str]
    theirs: tuple[str, str]
    their_message: str
    their_pending: str
    their_turn: str
    db: Database


@pytest.fixture(scope="module")
async def world(fuzz_server: Server) -> AsyncIterator[World]:
    w = World()
    w.admin = Client(fuzz_server.base_url, ADMIN_TOKEN)
    w.db = Database(fuzz_server.database_url)
    sessions = []
    for title in ("mine", "theirs"):
        task_id = (await w.admin.execute(CREATE_TASK, {"t": title}))["createTask"]["id"]
        session_id = (await w.admin.execute(CREATE_SESSION, {"task": task_id, "p": True}))["createSession"][
            "id"
        ]
        await w.admin.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
        sessions.append((task_id, session_id))
    w.mine, w.theirs = sessions
    w.their_turn = (await w.admin.execute(START, {"s": w.theirs[1]}))["startTurn"]["id"]
    posted = await w.admin.execute(POST, {"s": w.theirs[1], "c": "private", "k": "message"})
    w.their_message = posted["postMessage"]["id"]
    question = [{"prompt": "Deploy?", "options": [{"label": "yes"}, {"label": "no"}]}]
    async with w.admin.subscribe(ASK, {"s": w.theirs[1], "q": question}) as sub:
        w.their_pending = (await sub.next())["askClarification"]["bundle"]["pendingId"]
        assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
    w.user_id, token = await token_for(w.admin, "user", name=f"fuzz-user-{fuzz_server.port}")
    await w.admin.execute(GRANT, {"u": w.user_id, "t": w.mine[0]})
    w.user = Client(fuzz_server.base_url, token)
    yield w
    await w.admin.aclose()
    await w.user.aclose()
    await w.db.dispose()


async def _send(client: Client, body: Any, *, raw: bool = False) -> dict[str, Any] | None:
    if raw:
        response = await client.http.post(
            "/graphql", content=body, headers={"content-type": "application/json"}
        )
    else:
        response = await client.http.post("/graphql", json=body)
    return check_result(response)


async def _rejected_without_change(
    world: World, client: Client, body: Any, *, raw: bool = False, naming: str | None = None
) -> list[str | None]:
    """Codes of the errors of a request that must be rejected without any stored change; `naming`:
    the field the error message must name."""
    before = await snapshot(world.db)
    result = await _send(client, body, raw=raw)
    assert rejected(result), result
    assert await snapshot(world.db) == before, "a rejected request changed stored rows"
    if result is None:
        return []
    if naming is not None:
        assert any(naming in e["message"] for e in result["errors"]), result["errors"]
    return [(e.get("extensions") or {}).get("code") for e in result["errors"]]


HUGE = "x" * 1_000_000


async def test_huge_strings_are_refused_naming_the_field_and_change_nothing(world: World) -> None:
    codes = await _rejected_without_change(
        world, world.admin, {"query": CREATE_TASK_TITLE, "variables": {"t": HUGE}}, naming="title"
    )
    assert codes == ["BAD_USER_INPUT"]
    codes = await _rejected_without_change(
        world,
        world.admin,
        {"query": POST, "variables": {"s": world.theirs[1], "c": HUGE, "k": "message"}},
        naming="content",
    )
    assert codes == ["BAD_USER_INPUT"]
    answer = [{"questionId": "q1", "selectedOptionIds": ["q1_opt1"], "customText": HUGE}]
    codes = await _rejected_without_change(
        world,
        world.admin,
        {"query": RESPOND, "variables": {"p": world.their_pending, "a": answer, "r": False}},
        naming="customText",
    )
    assert codes == ["BAD_USER_INPUT"]
    document = "query { " + " ".join(f"a{i}: tasks {{ id }}" for i in range(6_000)) + " }"
    codes = await _rejected_without_change(world, world.admin, {"query": document})
    assert codes
    assert set(codes) <= {"QUERY_TOO_LARGE", "GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED"}


async def test_deep_nesting_and_cycles_are_refused_before_execution(world: World) -> None:
    braces = "{" * 500 + "}" * 500
    assert await _rejected_without_change(world, world.admin, {"query": braces}) == ["GRAPHQL_PARSE_FAILED"]
    cycle = "query { tasks { ...A } } fragment A on Task { id ...B } fragment B on Task { title ...A }"
    assert set(await _rejected_without_change(world, world.admin, {"query": cycle})) == {
        "GRAPHQL_VALIDATION_FAILED"
    }
    nested_input = {"query": CREATE_TASK_TITLE, "variables": {"t": json.loads("[" * 200 + "]" * 200)}}
    assert await _rejected_without_change(world, world.admin, nested_input) == ["BAD_USER_INPUT"]
    # Introspection nests only as deep as the (finite) schema: answered, and well formed.
    deep = "{ __schema { types { fields { type " + "{ ofType " * 30 + "{ name }" + " }" * 30 + " } } } }"
    assert await _send(world.admin, {"query": deep}) is not None


@pytest.mark.parametrize(
    "variables",
    [
        {"t": 5},
        {"t": None},
        {"t": ["a"]},
        {"t": {"a": 1}},
        {"t": True},
        {},
    ],
    ids=["int", "null", "list", "object", "bool", "missing"],
)
async def test_wrong_types_are_refused_with_a_code(world: World, variables: dict[str, Any]) -> None:
    codes = await _rejected_without_change(
        world, world.admin, {"query": CREATE_TASK_TITLE, "variables": variables}
    )
    assert codes == ["BAD_USER_INPUT"]


async def test_wrong_enum_boolean_and_int_values_are_refused(world: World) -> None:
    for query, variables in [
        (SET_STATE, {"s": world.theirs[1], "st": "EXPLODED"}),
        (RESPOND, {"p": world.their_pending, "a": [], "r": "true"}),
        ('query($f: Int) { sessionMessages(sessionId: "x", first: $f) { id } }', {"f": 2**40}),
        ('query($f: Int) { sessionMessages(sessionId: "x", first: $f) { id } }', {"f": 1.5}),
    ]:
        assert await _rejected_without_change(world, world.admin, {"query": query, "variables": variables})


async def test_not_graphql_at_all_is_a_client_error(world: World) -> None:
    for body in [b"not json", b"[]", b'[{"query": "{ tasks { id } }"}]', b'{"query": 5}', b"", b"\xff\xfe"]:
        before = await snapshot(world.db)
        await _send(world.admin, body, raw=True)
        assert await snapshot(world.db) == before


VALID_UNICODE = {
    "rtl override": "\u202etxt.exe",
    "emoji": "deploy \U0001f680\U0001f469\u200d\U0001f4bb",
    "combining": "e\u0301\u0301\u0301",
    "zero width": "a\u200b\u200c\u200db",
    "bom": "\ufeffstart",
    "arabic": "\u0645\u0631\u062d\u0628\u0627",
    "astral": "\U00010348\U0001d11e",
}


@pytest.mark.parametrize("text", list(VALID_UNICODE.values()), ids=list(VALID_UNICODE))
async def test_unicode_edge_cases_round_trip_exactly(world: World, text: str) -> None:
    created = await world.admin.execute(CREATE_TASK_TITLE, {"t": text})
    task = (await world.admin.execute(TASK, {"id": created["createTask"]["id"]}))["task"]
    assert task["title"] == text.strip()


@pytest.mark.parametrize(
    "escaped",
    ["a\\u0000b", "x\\ud800y", "\\udfff", "\\ud83d"],
    ids=["nul", "lone high surrogate", "lone low surrogate", "half an emoji"],
)
async def test_unstorable_text_is_refused_naming_the_field_and_changes_nothing(
    world: World, escaped: str
) -> None:
    # Written by hand: json.dumps would never produce these escapes from a Python string.
    as_variable = (
        '{"query": ' + json.dumps(CREATE_TASK_TITLE) + ', "variables": {"t": "' + escaped + '"}}'
    ).encode()
    literal = 'mutation { createTask(title: "' + escaped + '") { id } }'
    as_literal = json.dumps({"query": literal}).encode()  # GraphQL decodes the escape, not JSON
    for body, field in ((as_variable, "$.t"), (as_literal, "title")):
        before = await snapshot(world.db)
        result = await _send(world.admin, body, raw=True)
        assert result is not None, result
        assert rejected(result), result
        codes = [e["extensions"]["code"] for e in result["errors"]]
        if codes == ["GRAPHQL_PARSE_FAILED"]:
            # The GraphQL lexer itself refuses an unpaired surrogate escape in a literal.
            assert field == "title"
            assert "\\u0000" not in escaped
        else:
            assert codes == ["BAD_USER_INPUT"]
            assert result["errors"][0]["message"].startswith(f"{field}: ")
        assert await snapshot(world.db) == before


async def test_ids_of_other_users_tasks_are_not_found_and_change_nothing(world: World) -> None:
    their_task, their_session = world.theirs
    answer = [{"questionId": "q1", "selectedOptionIds": ["q1_opt1"]}]
    attempts: list[tuple[str, dict[str, Any]]] = [
        (RESPOND, {"p": world.their_pending, "a": answer, "r": False}),
        (RESPOND, {"p": world.their_pending, "a": [], "r": True}),
        (SET_STATE, {"s": their_session, "st": "CANCELLED"}),
        (START, {"s": their_session}),
        ("mutation($t: ID!) { completeTurn(turnId: $t) { id } }", {"t": world.their_turn}),
        (POST, {"s": their_session, "c": "hi", "k": "message"}),
        ("mutation($m: ID!) { deleteMessage(messageId: $m) }", {"m": world.their_message}),
        ('mutation($t: ID!) { advanceTask(taskId: $t, toStep: "done") { __typename } }', {"t": their_task}),
        (GRANT, {"u": world.user_id, "t": their_task}),
        ("mutation($t: ID!) { createSession(taskId: $t) { id } }", {"t": their_task}),
    ]
    for query, variables in attempts:
        codes = await _rejected_without_change(world, world.user, {"query": query, "variables": variables})
        assert set(codes) <= {"NOT_FOUND", "FORBIDDEN"}, (query, codes)
    # cancelClarification answers false for any bundle the caller cannot cancel, never an error that
    # would tell whether the id exists; it writes nothing either.
    before = await snapshot(world.db)
    cancel = "mutation($p: ID!) { cancelClarification(pendingId: $p) }"
    assert await world.user.execute(cancel, {"p": world.their_pending}) == {"cancelClarification": False}
    assert await snapshot(world.db) == before
    reads: list[tuple[str, dict[str, Any]]] = [
        ("query($id: ID!) { task(id: $id) { id } }", {"id": their_task}),
        ("query($t: ID!) { taskSessions(taskId: $t) { id } }", {"t": their_task}),
        ("query($s: ID!) { sessionMessages(sessionId: $s) { id content } }", {"s": their_session}),
        ("query($s: ID!) { sessionTurns(sessionId: $s) { id } }", {"s": their_session}),
        ("query($p: ID!) { clarification(pendingId: $p) { pendingId } }", {"p": world.their_pending}),
    ]
    for query, variables in reads:
        body = await _send(world.user, {"query": query, "variables": variables})
        assert body is not None
        assert "private" not in json.dumps(body), body
        assert their_session not in json.dumps(body.get("data")), body
    listed = await world.user.execute("{ tasks { id } }")
    assert [t["id"] for t in listed["tasks"]] == [world.mine[0]]
