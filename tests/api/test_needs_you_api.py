"""Needs you over real servers: `inbox` lists what waits for the caller across tasks, oldest first, by
the one current-turn rule, for both kinds; a person sees their granted tasks only, an agent token is
refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.api.client import Client, GraphQLError, Subscription
from tests.api.gql import CREATE_SESSION, GRANT, SET_STATE, START, running_session, token_for
from tests.api.kinds import API_CLARIFICATION, API_KINDS, API_PERMISSION, ApiKind
from tests.api.test_scale_out import sample, scrape
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


# --- inboxChanged ------------------------------------------------------------------------------

CHANGED = "subscription { inboxChanged { pendingId kind taskTitle agentWaiting askedAt } }"
UNGRANT = "mutation($u: ID!, $t: ID!) { revokeTask(userId: $u, taskId: $t) }"


async def second_session(admin: Client, task_id: str) -> str:
    """Another RUNNING session of the task, with an open turn."""
    session_id = (await admin.execute(CREATE_SESSION, {"task": task_id, "p": False}))["createSession"]["id"]
    await admin.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
    await admin.execute(START, {"s": session_id})
    return str(session_id)


async def pending_ids(sub: Subscription) -> list[str]:
    return [i["pendingId"] for i in (await sub.next())["inboxChanged"]]


async def until(sub: Subscription, expected: list[str], *, waiting: bool = False) -> list[dict[str, Any]]:
    """The next list whose items are `expected`, none with an agent waiting unless `waiting` (an ask
    that detaches sends the list with it waiting, then detached)."""
    for _ in range(10):
        items = (await sub.next())["inboxChanged"]
        if [i["pendingId"] for i in items] == expected and all(i["agentWaiting"] is waiting for i in items):
            return list(items)
    raise AssertionError(f"the inbox never became {expected}")


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_inbox_changed_sends_the_list_at_once_then_again_on_ask_respond_and_supersede(
    server: Server, admin: Client, kind: ApiKind
) -> None:
    task_id, session_id = await running_session(admin)
    waiting = await kind.detached(admin, session_id)
    caller = await person(server, admin, task_id)
    try:
        async with caller.subscribe(CHANGED) as sub:
            assert await pending_ids(sub) == [waiting]
            asked_in = await second_session(admin, task_id)
            asked = await kind.detached(admin, asked_in)
            await until(sub, [waiting, asked])
            assert (await kind.answer(caller, waiting))["__typename"] == kind.responded
            assert await pending_ids(sub) == [asked]
            await admin.execute(START, {"s": asked_in})  # a newer turn supersedes the other
            assert await pending_ids(sub) == []
    finally:
        await caller.aclose()


async def test_inbox_changed_follows_a_grant_given_and_taken_away(server: Server, admin: Client) -> None:
    task_id, session_id = await running_session(admin, title="Granted later")
    question = await API_CLARIFICATION.detached(admin, session_id)
    user_id, token = await token_for(admin, "user", name=f"person-{uuid.uuid4().hex[:8]}")
    caller = Client(server.base_url, token)
    try:
        async with caller.subscribe(CHANGED) as sub:
            assert await pending_ids(sub) == []
            await admin.execute(GRANT, {"u": user_id, "t": task_id})
            (item,) = (await sub.next())["inboxChanged"]
            assert (item["pendingId"], item["taskTitle"]) == (question, "Granted later")
            await admin.execute(UNGRANT, {"u": user_id, "t": task_id})
            assert await pending_ids(sub) == []
    finally:
        await caller.aclose()


async def test_inbox_changed_tells_when_an_agent_starts_waiting_and_stops(
    admin: Client, server: Server
) -> None:
    task_id, session_id = await running_session(admin)
    caller = await person(server, admin, task_id)
    try:
        async with caller.subscribe(CHANGED) as sub:
            assert await pending_ids(sub) == []
            async with API_PERMISSION.ask_live(admin, session_id) as ask:
                pending_id, _ = API_PERMISSION.asked((await ask.next())["askPermission"])
                (item,) = (await sub.next())["inboxChanged"]
                assert (item["pendingId"], item["agentWaiting"]) == (pending_id, True)
            (item,) = (await sub.next())["inboxChanged"]  # the agent went away: detached
            assert (item["pendingId"], item["agentWaiting"]) == (pending_id, False)
    finally:
        await caller.aclose()


async def test_an_agent_token_cannot_subscribe_to_an_inbox(server: Server, admin: Client) -> None:
    _, session_id = await running_session(admin)
    _, token = await token_for(admin, "agent", name=f"agent-{uuid.uuid4().hex[:8]}", session_id=session_id)
    agent = Client(server.base_url, token)
    try:
        with pytest.raises(GraphQLError) as refused:
            async with agent.subscribe(CHANGED) as sub:
                await sub.next()
        assert refused.value.codes == ["FORBIDDEN"]
    finally:
        await agent.aclose()


# --- blocked time at /metrics -----------------------------------------------------------------


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_metrics_count_what_waits_its_oldest_age_and_the_wait_until_a_decision(
    server: Server, admin: Client, kind: ApiKind
) -> None:
    labels = f'kind="{kind.name}"'
    _, session_id = await running_session(admin)
    before = await scrape(server)
    pending_id = await kind.detached(admin, session_id)
    waiting = await scrape(server)
    assert sample(waiting, "turnwise_pending_actions_waiting", labels) == (
        sample(before, "turnwise_pending_actions_waiting", labels) + 1
    )
    assert sample(waiting, "turnwise_pending_action_oldest_seconds", labels) > 0
    assert (await kind.answer(admin, pending_id))["__typename"] == kind.responded
    after = await scrape(server)
    assert sample(after, "turnwise_pending_actions_waiting", labels) == sample(
        before, "turnwise_pending_actions_waiting", labels
    )
    decided = f'{labels},outcome="{"ALLOWED" if kind.is_permission else "ANSWERED"}"'
    series = "turnwise_pending_action_decision_seconds_count"
    assert sample(after, series, decided) == sample(before, series, decided) + 1
