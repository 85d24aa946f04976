"""The package's Python agent client against a real server: ask, prompts (queued first), reconnect."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from backend.client import Agent, AskResult, GraphQLRequestError, PermissionResult, Prompt
from tests.api.client import Client
from tests.api.gql import running_session, token_for
from tests.api.test_mcp import wait_for_state
from tests.dialects import served
from tests.servers import ADMIN_TOKEN, Server

RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!) {
  respondToClarification(pendingId: $p, answers: $a) {
    __typename ... on ClarificationResponded { resumed queued } } }"""
QUESTION = {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}]}
PICK = [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"]}]


async def test_ask_returns_a_live_answer_and_a_detached_one_comes_back_as_a_prompt_once(
    server: Server, admin: Client
) -> None:
    task_id, session_id = await running_session(admin, title="client ask")
    _, token = await token_for(admin, "agent", name="client-ask", session_id=session_id)
    async with Agent(server.base_url, token, session_id) as agent:
        asking = asyncio.create_task(agent.ask([QUESTION]))
        pending_id = await wait_for_state(admin, task_id, "ACTIVE_LIVE")
        await admin.execute(RESPOND, {"p": pending_id, "a": PICK})
        live = await asyncio.wait_for(asking, 30)
        assert live == AskResult(
            "answered",
            pending_id,
            [
                {
                    "questionId": "q1",
                    "selectedOptionIds": ["q1_opt2"],
                    "selectedOptionLabels": ["PostgreSQL"],
                    "customText": None,
                }
            ],
        )
        detached = await agent.ask([{**QUESTION, "prompt": "Which cache?"}], timeout_seconds=0.1)
        assert detached.status == "detached"
        late = (await admin.execute(RESPOND, {"p": detached.pending_id, "a": PICK}))["respondToClarification"]
        assert late == {"__typename": "ClarificationResponded", "resumed": False, "queued": True}
        prompt = await asyncio.wait_for(anext(aiter(agent.prompts())), 30)
        assert "Which cache?" in prompt.text
        assert "PostgreSQL" in prompt.text
        assert await prompt.ack() is True
        await agent.post_message("thanks")
        await agent.complete_turn(prompt.turn_id, prompt.generation)
        with pytest.raises(GraphQLRequestError) as stale:
            await agent.complete_turn(prompt.turn_id, prompt.generation)
        assert stale.value.codes == ["INVALID_STATE"]


RESPOND_PERMISSION = """mutation($p: ID!, $b: PermissionBehavior!, $i: JSON, $m: String, $r: Boolean!) {
  respondToPermission(pendingId: $p, behavior: $b, updatedInput: $i, message: $m, remember: $r) {
    __typename } }"""
PERMISSION_STATE = "query($t: ID!) { taskSessions(taskId: $t) { activePermission { pendingId } } }"
BASH = {"command": "alembic upgrade head"}


async def test_ask_permission_returns_each_decision_a_person_or_a_rule_makes(
    server: Server, admin: Client
) -> None:
    task_id, session_id = await running_session(admin, title="client permission")
    _, token = await token_for(admin, "agent", name="client-permission", session_id=session_id)

    async def decided(agent: Agent, behavior: str, **kw: object) -> PermissionResult:
        asking = asyncio.create_task(agent.ask_permission("Bash", BASH))
        for _ in range(400):
            (session,) = (await admin.execute(PERMISSION_STATE, {"t": task_id}))["taskSessions"]
            if session["activePermission"]:
                break
            await asyncio.sleep(0.05)
        pending_id = session["activePermission"]["pendingId"]
        variables = {
            "p": pending_id,
            "b": behavior,
            "i": kw.get("i"),
            "m": kw.get("m"),
            "r": kw.get("r", False),
        }
        await admin.execute(RESPOND_PERMISSION, variables)
        return await asyncio.wait_for(asking, 30)

    async with Agent(server.base_url, token, session_id) as agent:
        edited = {"command": "alembic upgrade head --sql"}
        allowed = await decided(agent, "ALLOW", i=edited)
        assert (allowed.allowed, allowed.updated_input, allowed.auto) == (True, edited, False)
        denied = await decided(agent, "DENY", m="not during the release")
        assert (denied.status, denied.message, denied.updated_input) == (
            "denied",
            "not during the release",
            None,
        )
        await decided(agent, "ALLOW", r=True)
        by_rule = await agent.ask_permission("Bash", BASH)
        assert (by_rule.status, by_rule.updated_input, by_rule.auto) == ("allowed", BASH, True)
        detached = await agent.ask_permission("Bash", {"command": "rm -rf build"}, timeout_seconds=0.1)
        assert (detached.status, detached.allowed) == ("detached", False)


@pytest.fixture(params=["sqlite", "postgresql"])
def restartable(request: pytest.FixtureRequest) -> Iterator[Server]:
    with served(request.param, request) as srv:
        yield srv


async def test_prompts_reconnect_after_the_server_restarts(restartable: Server) -> None:
    srv = restartable
    admin = Client(srv.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await running_session(admin, title="client reconnect")
        _, token = await token_for(admin, "agent", name="client-reconnect", session_id=session_id)
    finally:
        await admin.aclose()
    async with Agent(srv.base_url, token, session_id, reconnect_seconds=0.2) as agent:
        detached = await agent.ask([QUESTION], timeout_seconds=0.1)
        received: list[Prompt] = []

        async def hold() -> None:
            async for prompt in agent.prompts():
                received.append(prompt)
                await prompt.ack()
                return

        holding = asyncio.create_task(hold())
        await asyncio.sleep(0.5)  # let the first connection be made, so that the kill breaks it
        srv.kill()
        srv.start()
        admin = Client(srv.base_url, ADMIN_TOKEN)
        try:
            answered = (await admin.execute(RESPOND, {"p": detached.pending_id, "a": PICK}))[
                "respondToClarification"
            ]
        finally:
            await admin.aclose()
        await asyncio.wait_for(holding, 60)
    assert answered["__typename"] == "ClarificationResponded"
    assert len(received) == 1
    assert "PostgreSQL" in received[0].text
