"""Needs you over real servers: `inbox` lists what waits for the caller across tasks, oldest first, by
the one current-turn rule, for both kinds; a person sees their granted tasks only, an agent token is
refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.api.client import Client, GraphQLError
from tests.api.gql import GRANT, START, running_session, token_for
from tests.api.kinds import API_CLARIFICATION, API_KINDS, API_PERMISSION, ApiKind
from tests.servers import Server

ITEM = """pendingId kind taskId taskTitle sessionId askedAt agentWaiting
  clarification { pendingId askedAt state questions { prompt } }
  permission { pendingId askedAt state toolName input }"""
INBOX = f"query($n: Int) {{ inbox(first: $n) {{ {ITEM} }} }}"
ASKED_AT = (
    """query($p: ID!) { clarification(pendingId: $p) { askedAt } permission(pendingId: $p) { askedAt } }"""
)


async def inbox(
    client: Client, first: int | None = None, *, tasks: set[str] | None = None
) -> list[dict[str, Any]]:
    """The caller's inbox; `tasks`: only the items of these (the admin sees every test's tasks)."""
    items = (await client.execute(INBOX, {"n": first}))["inbox"]
    return [i for i in items if tasks is None or i["taskId"] in tasks]


async def person(server: Server, admin: Client, *task_ids: str) -> Client:
    """A new user granted these tasks."""
    user_id, token = await token_for(admin, "user", name=f"person-{uuid.uuid4().hex[:8]}")
    for task_id in task_ids:
        await admin.execute(GRANT, {"u": user_id, "t": task_id})
    return Client(server.base_url, token)


async def asked_at(client: Client, pending_id: str) -> str:
    found = await client.execute(ASKED_AT, {"p": pending_id})
    shown = found["clarification"] or found["permission"]
    return str(shown["askedAt"])


async def test_the_inbox_lists_both_kinds_across_tasks_oldest_first_with_their_task_and_time(
    admin: Client,
) -> None:
    first_task, first_session = await running_session(admin, title="Ship the release")
    second_task, second_session = await running_session(admin, title="Migrate staging")
    older = await API_PERMISSION.detached(admin, first_session)
    newer = await API_CLARIFICATION.detached(admin, second_session)
    items = await inbox(admin, tasks={first_task, second_task})
    assert [(i["pendingId"], i["kind"], i["taskTitle"], i["sessionId"]) for i in items] == [
        (older, "PERMISSION", "Ship the release", first_session),
        (newer, "CLARIFICATION", "Migrate staging", second_session),
    ]
    assert items[0]["askedAt"] < items[1]["askedAt"]
    for item in items:
        assert item["askedAt"] == await asked_at(admin, item["pendingId"])
        assert item["agentWaiting"] is False
    permission, clarification = items
    assert permission["clarification"] is None
    assert permission["permission"]["toolName"] == "Bash"
    assert permission["permission"]["state"] == "ACTIVE_DETACHED"
    assert clarification["permission"] is None
    assert clarification["clarification"]["questions"] == [{"prompt": "Which database?"}]
    assert clarification["clarification"]["askedAt"] == clarification["askedAt"]


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_an_item_says_an_agent_waits_while_its_ask_is_live(admin: Client, kind: ApiKind) -> None:
    task_id, session_id = await running_session(admin)
    async with kind.ask_live(admin, session_id) as sub:
        pending_id, state = kind.asked((await sub.next())[kind.asking])
        assert state == "ACTIVE_LIVE"
        (item,) = await inbox(admin, tasks={task_id})
        assert (item["pendingId"], item["agentWaiting"]) == (pending_id, True)
        await kind.answer(admin, pending_id)
    assert await inbox(admin, tasks={task_id}) == []


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_a_superseded_or_settled_action_is_not_in_the_inbox(admin: Client, kind: ApiKind) -> None:
    task_id, session_id = await running_session(admin)
    superseded = await kind.detached(admin, session_id)
    await admin.execute(START, {"s": session_id})  # a newer turn: the request is history now
    assert (await kind.read(admin, superseded))["state"] == "SUPERSEDED_HISTORY"
    assert await inbox(admin, tasks={task_id}) == []
    answered = await kind.detached(admin, session_id)
    assert [i["pendingId"] for i in await inbox(admin, tasks={task_id})] == [answered]
    assert (await kind.answer(admin, answered))["__typename"] == kind.responded
    assert await inbox(admin, tasks={task_id}) == []


async def test_first_keeps_the_oldest(server: Server, admin: Client) -> None:
    task_id, session_id = await running_session(admin)
    other_task, other_session = await running_session(admin)
    oldest = await API_CLARIFICATION.detached(admin, session_id)
    newest = await API_PERMISSION.detached(admin, other_session)
    caller = await person(server, admin, task_id, other_task)
    try:
        assert [i["pendingId"] for i in await inbox(caller)] == [oldest, newest]
        assert [i["pendingId"] for i in await inbox(caller, 1)] == [oldest]
    finally:
        await caller.aclose()


async def test_a_person_sees_only_their_granted_tasks_and_support_sees_every_task(
    server: Server, admin: Client
) -> None:
    mine, my_session = await running_session(admin)
    theirs, their_session = await running_session(admin)
    my_request = await API_PERMISSION.detached(admin, my_session)
    their_question = await API_CLARIFICATION.detached(admin, their_session)
    caller = await person(server, admin, mine)
    _, support_token = await token_for(admin, "support", name=f"support-{uuid.uuid4().hex[:8]}")
    support = Client(server.base_url, support_token)
    try:
        assert [i["pendingId"] for i in await inbox(caller)] == [my_request]
        seen = await inbox(support, 500, tasks={mine, theirs})
        assert [i["pendingId"] for i in seen] == [my_request, their_question]
    finally:
        await caller.aclose()
        await support.aclose()


async def test_an_agent_token_has_no_inbox(server: Server, admin: Client) -> None:
    _, session_id = await running_session(admin)
    await API_CLARIFICATION.detached(admin, session_id)
    _, token = await token_for(admin, "agent", name=f"agent-{uuid.uuid4().hex[:8]}", session_id=session_id)
    agent = Client(server.base_url, token)
    try:
        with pytest.raises(GraphQLError) as refused:
            await inbox(agent)
        assert refused.value.codes == ["FORBIDDEN"]
    finally:
        await agent.aclose()


@pytest.mark.parametrize("first", [0, -1, 501])
async def test_a_first_out_of_bounds_is_refused(admin: Client, first: int) -> None:
    with pytest.raises(GraphQLError) as refused:
        await admin.execute(INBOX, {"n": first})
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert "first" in refused.value.errors[0]["message"]
