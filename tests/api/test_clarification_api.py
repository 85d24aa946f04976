"""The clarification lifecycle over real servers: GraphQL subscriptions, several processes, a crash."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from backend import faults
from tests.api.client import Client, GraphQLError
from tests.api.gql import CREATE_SESSION, CREATE_TASK, START
from tests.conftest import redis_url
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database, server_pair

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $t: Float) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId state turnId questions { questionId options { id } } } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds customText } }
    ... on ClarificationRejected { pendingId }
    ... on ClarificationDetached { pendingId }
    ... on ClarificationClosed { pendingId status }
  } }"""
BUNDLE = "state questions { questionId status agentDisconnected response { selectedOptionIds customText } }"
RESPOND = f"""mutation($p: ID!, $a: [ClarificationAnswerInput!]!, $r: Boolean!) {{
  respondToClarification(pendingId: $p, answers: $a, rejected: $r) {{
    __typename
    ... on ClarificationResponded {{ resumed bundle {{ {BUNDLE} }} }}
    ... on ClarificationConflict {{ reason winner: bundle {{ {BUNDLE} }} }}
    ... on ClarificationDeliveryFailed {{ retryable message }}
  }} }}"""
CLARIFICATION = f"query($p: ID!) {{ clarification(pendingId: $p) {{ pendingId {BUNDLE} }} }}"
ACTIVE = (
    "query($t: ID!) { taskSessions(taskId: $t) { id pendingAction activeClarification { pendingId state } } }"
)
ADVANCE = """mutation($t: ID!, $to: String!) { advanceTask(taskId: $t, toStep: $to) { __typename
  ... on TaskAdvanced { task { workflowStep } } ... on TaskAdvanceBlocked { reason sessionId } } }"""
CANCEL = "mutation($p: ID!) { cancelClarification(pendingId: $p) }"

QUESTION = {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}]}
YES = [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"]}]


async def session(admin: Client) -> tuple[str, str]:
    task_id = (await admin.execute(CREATE_TASK, {"t": "a task"}))["createTask"]["id"]
    session_id = (await admin.execute(CREATE_SESSION, {"task": task_id, "p": True}))["createSession"]["id"]
    await admin.execute(START, {"s": session_id})
    return task_id, session_id


async def respond(
    client: Client, pending_id: str, answers: list[dict[str, Any]] | None, rejected: bool = False
) -> Any:
    return (await client.execute(RESPOND, {"p": pending_id, "a": answers or [], "r": rejected}))[
        "respondToClarification"
    ]


@pytest.mark.scenario("S01", "S02")
async def test_agent_asks_times_out_and_the_question_stays_answerable(admin: Client) -> None:
    task_id, session_id = await session(admin)
    async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.3}) as sub:
        asked = (await sub.next())["askClarification"]
        assert asked["__typename"] == "ClarificationAsked"
        assert asked["bundle"]["state"] == "ACTIVE_LIVE"
        pending_id = asked["bundle"]["pendingId"]
        assert (await sub.next())["askClarification"] == {
            "__typename": "ClarificationDetached",
            "pendingId": pending_id,
        }
    bundle = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
    assert bundle["state"] == "ACTIVE_DETACHED"
    assert bundle["questions"][0]["agentDisconnected"] is True
    sessions = (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]
    assert sessions == [
        {
            "id": session_id,
            "pendingAction": "CLARIFICATION",
            "activeClarification": {"pendingId": pending_id, "state": "ACTIVE_DETACHED"},
        }
    ]
    blocked = (await admin.execute(ADVANCE, {"t": task_id, "to": "review"}))["advanceTask"]
    assert blocked == {
        "__typename": "TaskAdvanceBlocked",
        "reason": blocked["reason"],
        "sessionId": session_id,
    }
    # A newer turn makes it inert history: no overlay, no barrier, and a late answer conflicts.
    await admin.execute(START, {"s": session_id})
    late = await respond(admin, pending_id, YES)
    assert late["__typename"] == "ClarificationConflict"
    assert late["reason"] == "SUPERSEDED"
    assert late["winner"]["state"] == "SUPERSEDED_HISTORY"
    sessions = (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]
    assert sessions[0]["activeClarification"] is None
    assert sessions[0]["pendingAction"] is None
    advanced = (await admin.execute(ADVANCE, {"t": task_id, "to": "review"}))["advanceTask"]
    assert advanced == {"__typename": "TaskAdvanced", "task": {"workflowStep": "review"}}


async def test_live_answer_reaches_the_waiting_agent_and_a_second_response_conflicts(admin: Client) -> None:
    _, session_id = await session(admin)
    async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
        pending_id = (await sub.next())["askClarification"]["bundle"]["pendingId"]
        first = await respond(admin, pending_id, YES)
        assert first["__typename"] == "ClarificationResponded"
        assert first["resumed"] is False
        assert first["bundle"]["state"] == "TERMINAL"
        answered = (await sub.next())["askClarification"]
        assert answered == {
            "__typename": "ClarificationAnswered",
            "pendingId": pending_id,
            "answers": [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"], "customText": None}],
        }
    second = await respond(admin, pending_id, None, rejected=True)
    assert second["__typename"] == "ClarificationConflict"
    assert second["reason"] == "TERMINAL"
    # The conflict carries the bundle, so a losing client can show the winning answer.
    assert second["winner"]["questions"][0]["response"]["selectedOptionIds"] == ["q1_opt2"]


async def test_cancel_ends_the_agent_wait(admin: Client) -> None:
    _, session_id = await session(admin)
    async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
        pending_id = (await sub.next())["askClarification"]["bundle"]["pendingId"]
        assert (await admin.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is True
        closed = (await sub.next())["askClarification"]
        assert closed == {"__typename": "ClarificationClosed", "pendingId": pending_id, "status": "CANCELLED"}
    assert (await admin.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is False


@pytest.mark.parametrize(
    ("questions", "field"),
    [
        ([], "questions"),
        ([{"prompt": "x?", "options": [{"label": "only"}]}], "questions[0].options"),
        ([{**QUESTION, "id": "a"}, {**QUESTION, "id": "a"}], "questions[1].id"),
    ],
)
async def test_invalid_questions_are_refused_naming_the_field(
    admin: Client, questions: list[dict[str, Any]], field: str
) -> None:
    _, session_id = await session(admin)
    async with admin.subscribe(ASK, {"s": session_id, "q": questions}) as sub:
        with pytest.raises(GraphQLError) as err:
            await sub.next()
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert field in err.value.errors[0]["message"]
    messages = await admin.execute(
        "query($s: ID!) { sessionMessages(sessionId: $s) { id } }", {"s": session_id}
    )
    assert messages == {"sessionMessages": []}


@pytest.fixture
def two_servers() -> Iterator[tuple[Server, Server]]:
    with server_pair("postgresql", broadcast_url=redis_url()) as pair:
        yield pair


async def test_answer_submitted_to_one_server_reaches_the_agent_waiting_on_another(
    two_servers: tuple[Server, Server],
) -> None:
    a, b = two_servers
    agent, user = Client(a.base_url, ADMIN_TOKEN), Client(b.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await session(user)
        async with agent.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            asked = (await sub.next())["askClarification"]["bundle"]
            seen_by_b = (await user.execute(CLARIFICATION, {"p": asked["pendingId"]}))["clarification"]
            assert seen_by_b["state"] == "ACTIVE_LIVE"  # B knows A holds a live waiter
            result = await respond(user, asked["pendingId"], YES)
            assert result["__typename"] == "ClarificationResponded"
            answered = (await sub.next())["askClarification"]
            assert answered["__typename"] == "ClarificationAnswered"
            assert answered["answers"][0]["selectedOptionIds"] == ["q1_opt2"]
    finally:
        await agent.aclose()
        await user.aclose()


@pytest.fixture(params=["sqlite", "postgresql"])
def crash_db(request: pytest.FixtureRequest) -> Iterator[str]:
    """The real kill-and-restart runs on both dialects."""
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    url = fresh_database(request.param)
    yield url
    drop_database(url)


@pytest.mark.scenario("S21")
async def test_a_crash_between_claim_and_confirmation_loses_no_answer_after_restart(crash_db: str) -> None:
    url = crash_db
    crashing = Server(url, env={"TURNWISE_FAULT_POINTS": "after_claim"}).start()
    client = Client(crashing.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await session(client)
        async with client.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            pending_id = (await sub.next())["askClarification"]["bundle"]["pendingId"]
            with pytest.raises(httpx.HTTPError):
                await respond(client, pending_id, YES)  # the process dies right after the claim commits
            assert crashing.proc is not None
            assert crashing.proc.wait(10) == faults.CRASH_EXIT_CODE
        await client.aclose()
        restarted = Server(url).start()
        client = Client(restarted.base_url, ADMIN_TOKEN)
        try:
            bundle = (await client.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
            assert bundle["state"] == "ACTIVE_DETACHED"
            assert bundle["questions"][0]["status"] == "PENDING"
            assert bundle["questions"][0]["response"] is None
            # The agent reconnects and asks again: the same bundle, live again; the answer arrives.
            async with client.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
                again = (await sub.next())["askClarification"]["bundle"]
                assert again["pendingId"] == pending_id
                assert again["state"] == "ACTIVE_LIVE"
                assert (await respond(client, pending_id, YES))["__typename"] == "ClarificationResponded"
                assert (await sub.next())["askClarification"]["__typename"] == "ClarificationAnswered"
        finally:
            restarted.stop()
    finally:
        await client.aclose()
        crashing.kill()
        await asyncio.sleep(0)


@pytest.fixture
def fast_heartbeat_servers() -> Iterator[tuple[Server, Server]]:
    env = {"TURNWISE_HEARTBEAT_SECONDS": "0.3", "TURNWISE_LIVE_CONFIRMATION_SECONDS": "120"}
    with server_pair("postgresql", broadcast_url=redis_url(), env=env) as pair:
        yield pair


async def test_an_answer_to_a_waiter_whose_process_crashed_is_restored_without_waiting_out_the_bound(
    fast_heartbeat_servers: tuple[Server, Server],
) -> None:
    a, b = fast_heartbeat_servers
    agent, user = Client(a.base_url, ADMIN_TOKEN), Client(b.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await session(user)
        async with agent.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            pending_id = (await sub.next())["askClarification"]["bundle"]["pendingId"]
            a.kill()  # the waiter's process dies without detaching anything
            seen = (await user.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
            assert seen["state"] == "ACTIVE_LIVE"  # its heartbeat is still fresh
            started = time.monotonic()
            result = await respond(user, pending_id, YES)
            waited = time.monotonic() - started
        assert result["__typename"] == "ClarificationDeliveryFailed"
        assert result["retryable"] is True
        # Not a speed figure: without the heartbeat check it would wait out the 120 s bound.
        assert waited < 60, f"the responder waited {waited:.1f}s for a dead waiter"
        after = (await user.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert after["state"] == "ACTIVE_DETACHED", "the answer stays answerable"
    finally:
        await agent.aclose()
        await user.aclose()
