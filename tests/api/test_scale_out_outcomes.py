"""Every outcome of a pending action crosses workers intact: the agent waits on one worker of
`turnwise serve --workers 2`, the person's response lands on the other, is handed over the bus to the
agent's worker, confirmed there, and the agent receives exactly what was decided, once."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.api.client import Client, Subscription
from tests.api.gql import running_session
from tests.api.kinds import BASH, permission_vars
from tests.api.test_scale_out import pinned_connections, waiter_instance
from tests.conftest import redis_url
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $t: Float) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId state questions { questionId } } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds customText } }
    ... on ClarificationRejected { pendingId }
    ... on ClarificationDetached { pendingId }
    ... on ClarificationClosed { pendingId status } } }"""
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!, $r: Boolean!) {
  respondToClarification(pendingId: $p, answers: $a, rejected: $r) {
    __typename
    ... on ClarificationResponded { resumed queued bundle { state } }
    ... on ClarificationConflict { reason winner: bundle { state } }
    ... on ClarificationDeliveryFailed { retryable message } } }"""
CLARIFICATION = """query($p: ID!) { clarification(pendingId: $p) {
  state questions { questionId status response { selectedOptionIds customText } } } }"""

DECISION = "decision { behavior updatedInput message remember auto ruleId rule { id toolName anyInput } }"
ASK_PERMISSION = f"""subscription($s: ID!, $n: String!, $i: JSON!, $t: Float) {{
  askPermission(sessionId: $s, toolName: $n, input: $i, timeoutSeconds: $t) {{
    __typename
    ... on PermissionAsked {{ request {{ pendingId state toolName input }} }}
    ... on PermissionDecided {{ pendingId {DECISION} }}
    ... on PermissionDetached {{ pendingId }}
    ... on PermissionClosed {{ pendingId }} }} }}"""
RESPOND_PERMISSION = f"""mutation($p: ID!, $b: PermissionBehavior!, $i: JSON, $m: String, $r: Boolean!,
                                  $any: Boolean!) {{
  respondToPermission(pendingId: $p, behavior: $b, updatedInput: $i, message: $m, remember: $r,
                      rememberAnyInput: $any) {{
    __typename
    ... on PermissionResponded {{ resumed queued request {{ state {DECISION} }} }}
    ... on ClarificationConflict {{ reason }}
    ... on ClarificationDeliveryFailed {{ retryable message }} }} }}"""
PERMISSION = f"query($p: ID!) {{ permission(pendingId: $p) {{ state {DECISION} }} }}"
RULES = "query($s: ID!) { permissionRules(sessionId: $s) { id toolName input } }"

# Three questions, answered three ways: one option, several options, custom text alone.
QUESTIONS: list[dict[str, Any]] = [
    {
        "prompt": "Which database?",
        "options": [{"id": "sqlite", "label": "SQLite"}, {"id": "pg", "label": "PostgreSQL"}],
    },
    {
        "prompt": "Which checks?",
        "multiSelect": True,
        "options": [{"label": "lint"}, {"label": "types"}, {"label": "tests"}],
    },
    {"title": "Notes", "prompt": "Anything else?", "options": [{"label": "No"}, {"label": "Later"}]},
]
ANSWERS: list[dict[str, Any]] = [
    {"questionId": "q1", "selectedOptionIds": ["pg"], "customText": None},
    {"questionId": "q2", "selectedOptionIds": ["q2_opt3", "q2_opt1"], "customText": "types can wait"},
    {"questionId": "q3", "selectedOptionIds": [], "customText": 'Ünïcode ✓ and "quotes"\nover two lines'},
]
# An edited input with every kind of JSON value, nested: it must reach the agent as the person sent it.
EDITED: dict[str, Any] = {
    "command": "alembic upgrade head --sql",
    "description": "dry run ✓",
    "timeout": 1.5,
    "retries": 3,
    "env": {"PGHOST": "db", "VERBOSE": True, "PASSWORD": None},
    "args": ["--sql", 7, [0.25, False], {"deep": {"deeper": ["x"]}}],
}
NO_DECISION = {"message": None, "remember": False, "auto": False, "ruleId": None, "rule": None}


@pytest.fixture(scope="module")
def two_workers(pg_url: str) -> Iterator[Server]:
    """One `serve --workers 2` over PostgreSQL and Redis for the module's tests (each test works in
    a task and session of its own). Skips as test_scale_out.py does when either is missing."""
    del pg_url  # only checks that PostgreSQL is there; the server gets its own database
    broadcast = redis_url()  # skips before a database is made when Redis is missing
    url = fresh_database("postgresql")
    server = Server(url, broadcast_url=broadcast, env={"TURNWISE_WORKERS": "2"})
    try:
        yield server.start()
    finally:
        server.stop()
        drop_database(url)


@dataclass
class Workers:
    """A pinned keep-alive connection to the worker holding the agent's wait and to the other one."""

    agents: httpx.AsyncClient
    other: httpx.AsyncClient
    agents_id: str
    other_id: str

    async def post(self, on: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        """Run a mutation on `on` ("other" or "agents"), checking it really ran on that worker."""
        http, instance = (self.other, self.other_id) if on == "other" else (self.agents, self.agents_id)
        body = (await http.post("/graphql", json={"query": query, "variables": variables})).json()
        assert (await http.get("/readyz")).json()["instance"] == instance  # same connection, same worker
        assert "errors" not in body, body
        return dict(body["data"])


@contextlib.asynccontextmanager
async def workers_of(server: Server, pending_id: str) -> AsyncIterator[Workers]:
    agents_id = await waiter_instance(server.database_url, pending_id)
    pinned = await pinned_connections(server.base_url)
    try:
        assert agents_id in pinned, (agents_id, sorted(pinned))
        (other_id,) = [i for i in pinned if i != agents_id]
        yield Workers(pinned[agents_id], pinned[other_id], agents_id, other_id)
    finally:
        for http in pinned.values():
            await http.aclose()


@contextlib.asynccontextmanager
async def admin_of(server: Server) -> AsyncIterator[Client]:
    client = Client(server.base_url, ADMIN_TOKEN)
    try:
        yield client
    finally:
        await client.aclose()


async def ended(sub: Subscription) -> None:
    """The wait delivered its one outcome and the server completed it: nothing else follows."""
    with pytest.raises(StopAsyncIteration):
        await sub.next()


async def asked_question(sub: Subscription) -> str:
    asked = (await sub.next())["askClarification"]
    assert asked["__typename"] == "ClarificationAsked", asked
    assert asked["bundle"]["state"] == "ACTIVE_LIVE"
    return str(asked["bundle"]["pendingId"])


async def asked_permission(sub: Subscription, tool_input: dict[str, Any]) -> str:
    asked = (await sub.next())["askPermission"]
    assert asked["__typename"] == "PermissionAsked", asked
    assert asked["request"]["state"] == "ACTIVE_LIVE"
    assert asked["request"]["input"] == tool_input
    return str(asked["request"]["pendingId"])


def delivered_live(responded: dict[str, Any], typename: str) -> None:
    assert responded["__typename"] == typename, responded
    assert (responded["resumed"], responded["queued"]) == (False, False)  # live, not resumed or queued


async def decided_on_the_other_worker(
    server: Server, admin: Client, session_id: str, behavior: str, **decision: Any
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The agent asks to run BASH and waits; the person's decision (`permission_vars`) lands on the
    worker not holding the wait. (pending id, the respond's result, the decision the agent received);
    the agent's wait delivered that one outcome and ended."""
    async with admin.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": BASH, "t": 60}) as sub:
        pending_id = await asked_permission(sub, BASH)
        async with workers_of(server, pending_id) as workers:
            variables = permission_vars(pending_id, behavior, **decision)
            responded = (await workers.post("other", RESPOND_PERMISSION, variables))["respondToPermission"]
        delivered_live(responded, "PermissionResponded")
        decided = (await sub.next())["askPermission"]
        assert decided["__typename"] == "PermissionDecided", decided
        assert decided["pendingId"] == pending_id
        await ended(sub)
    return pending_id, responded, dict(decided["decision"])


# --- clarifications -----------------------------------------------------------------------------


async def test_several_answers_given_on_the_other_worker_reach_the_agent_field_by_field(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="several answers")
        async with admin.subscribe(ASK, {"s": session_id, "q": QUESTIONS, "t": 60}) as sub:
            pending_id = await asked_question(sub)
            async with workers_of(two_workers, pending_id) as workers:
                data = await workers.post("other", RESPOND, {"p": pending_id, "a": ANSWERS, "r": False})
            responded = data["respondToClarification"]
            delivered_live(responded, "ClarificationResponded")
            assert responded["bundle"]["state"] == "TERMINAL"
            answered = (await sub.next())["askClarification"]
            assert answered["__typename"] == "ClarificationAnswered", answered
            assert answered["pendingId"] == pending_id
            got = answered["answers"]
            assert len(got) == len(ANSWERS)
            by_question = {a["questionId"]: a for a in got}
            assert sorted(by_question) == ["q1", "q2", "q3"]  # each question once
            for sent in ANSWERS:
                received = by_question[sent["questionId"]]
                assert received["selectedOptionIds"] == sent["selectedOptionIds"]  # in the order sent
                assert received["customText"] == sent["customText"]
            await ended(sub)
        stored = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert stored["state"] == "TERMINAL"
        assert {q["questionId"]: (q["status"], q["response"]) for q in stored["questions"]} == {
            a["questionId"]: (
                "ANSWERED",
                {"selectedOptionIds": a["selectedOptionIds"], "customText": a["customText"]},
            )
            for a in ANSWERS
        }


async def test_a_question_skipped_on_the_other_worker_reaches_the_agent_as_rejected(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="skipped")
        async with admin.subscribe(ASK, {"s": session_id, "q": QUESTIONS, "t": 60}) as sub:
            pending_id = await asked_question(sub)
            async with workers_of(two_workers, pending_id) as workers:
                data = await workers.post("other", RESPOND, {"p": pending_id, "a": [], "r": True})
            responded = data["respondToClarification"]
            delivered_live(responded, "ClarificationResponded")
            assert responded["bundle"]["state"] == "TERMINAL"
            rejected = (await sub.next())["askClarification"]
            assert rejected == {"__typename": "ClarificationRejected", "pendingId": pending_id}
            await ended(sub)
        stored = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert stored["state"] == "TERMINAL"
        assert [(q["status"], q["response"]) for q in stored["questions"]] == [("REJECTED", None)] * 3


async def test_a_second_answer_after_one_crossed_workers_is_a_conflict_on_either_worker(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="answered twice")
        async with admin.subscribe(ASK, {"s": session_id, "q": QUESTIONS, "t": 60}) as sub:
            pending_id = await asked_question(sub)
            async with workers_of(two_workers, pending_id) as workers:
                first = await workers.post("other", RESPOND, {"p": pending_id, "a": ANSWERS, "r": False})
                delivered_live(first["respondToClarification"], "ClarificationResponded")
                answered = (await sub.next())["askClarification"]
                assert answered["__typename"] == "ClarificationAnswered", answered
                # Delivered: a second answer, a skip, on either worker, is refused and changes nothing.
                other_answer = [dict(a, customText="changed my mind") for a in ANSWERS]
                for on, answers, rejected in (
                    ("other", other_answer, False),
                    ("other", [], True),
                    ("agents", other_answer, False),
                    ("agents", [], True),
                ):
                    again = await workers.post(on, RESPOND, {"p": pending_id, "a": answers, "r": rejected})
                    assert again["respondToClarification"] == {
                        "__typename": "ClarificationConflict",
                        "reason": "TERMINAL",
                        "winner": {"state": "TERMINAL"},
                    }, (on, rejected)
            await ended(sub)  # the agent got the first answer only, once
        stored = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert [q["response"]["customText"] for q in stored["questions"]] == [
            a["customText"] for a in ANSWERS
        ]


# --- permissions --------------------------------------------------------------------------------


async def test_an_allow_on_the_other_worker_reaches_the_agent_with_the_input_asked(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="allowed")
        pending_id, responded, decision = await decided_on_the_other_worker(
            two_workers, admin, session_id, "ALLOW"
        )
        expected = {"behavior": "ALLOW", "updatedInput": BASH, **NO_DECISION}
        assert decision == expected
        assert responded["request"] == {"state": "TERMINAL", "decision": expected}
        stored = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
        assert stored == {"state": "TERMINAL", "decision": expected}
        assert (await admin.execute(RULES, {"s": session_id}))["permissionRules"] == []


async def test_an_edited_allow_on_the_other_worker_reaches_the_agent_with_the_edited_input(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="edited")
        _, _, decision = await decided_on_the_other_worker(
            two_workers, admin, session_id, "ALLOW", updated_input=EDITED
        )
        assert decision == {"behavior": "ALLOW", "updatedInput": EDITED, **NO_DECISION}
        # Field by field, types included (1.5 stays a float, 3 an int, None a null).
        received = decision["updatedInput"]
        assert {k: type(v) for k, v in received.items()} == {k: type(v) for k, v in EDITED.items()}
        assert [type(v) for v in received["args"]] == [str, int, list, dict]
        assert [type(v) for v in received["args"][2]] == [float, bool]


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        ("Not on staging: use the dry run", "Not on staging: use the dry run"),
        ("  padded  ", "padded"),
        (None, None),
    ],
    ids=["with-reason", "reason-trimmed", "without-reason"],
)
async def test_a_deny_on_the_other_worker_reaches_the_agent_with_its_reason(
    two_workers: Server, sent: str | None, reason: str | None
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="denied")
        pending_id, responded, decision = await decided_on_the_other_worker(
            two_workers, admin, session_id, "DENY", message=sent
        )
        # A denial runs nothing: no input for the tool, only the reason.
        expected = {**NO_DECISION, "behavior": "DENY", "updatedInput": None, "message": reason}
        assert decision == expected
        assert responded["request"] == {"state": "TERMINAL", "decision": expected}
        stored = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
        assert stored == {"state": "TERMINAL", "decision": expected}


async def test_an_always_allow_on_the_other_worker_reaches_the_agent_and_its_rule_decides_the_next_ask(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="always allow")
        pending_id, _, decision = await decided_on_the_other_worker(
            two_workers, admin, session_id, "ALLOW", remember=True
        )
        assert decision == {**NO_DECISION, "behavior": "ALLOW", "updatedInput": BASH, "remember": True}
        (rule,) = (await admin.execute(RULES, {"s": session_id}))["permissionRules"]
        assert (rule["toolName"], rule["input"]) == ("Bash", BASH)
        # The same call again is allowed at once by the rule, whichever worker takes the ask ...
        async with admin.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": BASH, "t": 60}) as sub:
            auto = (await sub.next())["askPermission"]
            assert auto["__typename"] == "PermissionDecided", auto
            assert auto["pendingId"] != pending_id
            assert auto["decision"] == {
                "behavior": "ALLOW",
                "updatedInput": BASH,
                "message": None,
                "remember": False,
                "auto": True,
                "ruleId": rule["id"],
                "rule": {"id": rule["id"], "toolName": "Bash", "anyInput": False},
            }
            await ended(sub)
        # ... and a call with another input is still asked: the rule allows that one input only.
        other_input = {**BASH, "command": "alembic downgrade -1"}
        variables = {"s": session_id, "n": "Bash", "i": other_input, "t": 60}
        async with admin.subscribe(ASK_PERMISSION, variables) as sub:
            await asked_permission(sub, other_input)


async def test_an_edited_allow_remembered_for_any_input_on_the_other_worker_reaches_the_agent_and_applies(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="always allow any input")
        _, _, decision = await decided_on_the_other_worker(
            two_workers, admin, session_id, "ALLOW", updated_input=EDITED, remember=True, any_input=True
        )
        assert decision == {**NO_DECISION, "behavior": "ALLOW", "updatedInput": EDITED, "remember": True}
        (rule,) = (await admin.execute(RULES, {"s": session_id}))["permissionRules"]
        assert (rule["toolName"], rule["input"]) == ("Bash", None)  # any input
        other_input = {"command": "ls -la", "description": "look around"}
        variables = {"s": session_id, "n": "Bash", "i": other_input, "t": 60}
        async with admin.subscribe(ASK_PERMISSION, variables) as sub:
            auto = (await sub.next())["askPermission"]
            assert auto["__typename"] == "PermissionDecided", auto
            assert auto["decision"] == {
                "behavior": "ALLOW",
                "updatedInput": other_input,  # the call's own input: the rule allows it as asked
                "message": None,
                "remember": False,
                "auto": True,
                "ruleId": rule["id"],
                "rule": {"id": rule["id"], "toolName": "Bash", "anyInput": True},
            }
            await ended(sub)


async def test_a_second_decision_after_one_crossed_workers_is_a_conflict_on_either_worker(
    two_workers: Server,
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="decided twice")
        async with admin.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": BASH, "t": 60}) as sub:
            pending_id = await asked_permission(sub, BASH)
            async with workers_of(two_workers, pending_id) as workers:
                first = await workers.post("other", RESPOND_PERMISSION, permission_vars(pending_id, "ALLOW"))
                delivered_live(first["respondToPermission"], "PermissionResponded")
                decided = (await sub.next())["askPermission"]
                assert decided["__typename"] == "PermissionDecided", decided
                assert decided["decision"]["behavior"] == "ALLOW"
                for on in ("other", "agents"):
                    for variables in (
                        permission_vars(pending_id, "DENY", message="too late"),
                        permission_vars(pending_id, "ALLOW", remember=True),
                    ):
                        again = await workers.post(on, RESPOND_PERMISSION, variables)
                        assert again["respondToPermission"] == {
                            "__typename": "ClarificationConflict",
                            "reason": "TERMINAL",
                        }, (on, variables)
            await ended(sub)  # the agent got the first decision only, once
        stored = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
        assert stored == {
            "state": "TERMINAL",
            "decision": {"behavior": "ALLOW", "updatedInput": BASH, **NO_DECISION},
        }
        assert (await admin.execute(RULES, {"s": session_id}))[
            "permissionRules"
        ] == []  # the late remember wrote none


# --- the request closed from the other worker ---------------------------------------------------

START = "mutation($s: ID!) { startTurn(sessionId: $s) { id } }"
SET_STATE = "mutation($s: ID!, $st: SessionState!) { setSessionState(sessionId: $s, state: $st) { state } }"


@pytest.mark.parametrize(
    ("kind", "closing", "status"),
    [
        ("clarification", "newer-turn", "PENDING"),
        ("clarification", "session-completed", "EXPIRED"),
        ("permission", "newer-turn", None),
        ("permission", "session-completed", None),
    ],
)
async def test_a_wait_closed_from_the_other_worker_ends_closed_for_the_agent(
    two_workers: Server, kind: str, closing: str, status: str | None
) -> None:
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title=f"{kind} {closing}")
        if kind == "clarification":
            query, variables, field = ASK, {"s": session_id, "q": QUESTIONS, "t": 60}, "askClarification"
        else:
            query, variables = ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": BASH, "t": 60}
            field = "askPermission"
        async with admin.subscribe(query, variables) as sub:
            if kind == "clarification":
                pending_id = await asked_question(sub)
            else:
                pending_id = await asked_permission(sub, BASH)
            async with workers_of(two_workers, pending_id) as workers:
                if closing == "newer-turn":
                    await workers.post("other", START, {"s": session_id})
                else:
                    done = await workers.post("other", SET_STATE, {"s": session_id, "st": "COMPLETED"})
                    assert done["setSessionState"] == {"state": "COMPLETED"}
            closed = (await sub.next())[field]
            if kind == "clarification":
                assert closed == {
                    "__typename": "ClarificationClosed",
                    "pendingId": pending_id,
                    "status": status,
                }
            else:
                assert closed == {"__typename": "PermissionClosed", "pendingId": pending_id}
            await ended(sub)


# An integer beyond 64 bits in an edited input (the request body was read with a float in its place).


async def test_an_edited_allow_with_a_big_integer_reaches_the_agent_exactly(two_workers: Server) -> None:
    edited = {**BASH, "ticket": 2**70 + 1}
    async with admin_of(two_workers) as admin:
        _, session_id = await running_session(admin, title="big integer")
        _, _, decision = await decided_on_the_other_worker(
            two_workers, admin, session_id, "ALLOW", updated_input=edited
        )
        received = decision["updatedInput"]["ticket"]
        assert (type(received), received) == (int, 2**70 + 1)
