"""Runner tokens: a person issues one for their agent runner; its hooks' sessions are made on first
sight under the runner's task of their folder, granted to that person, on both dialects."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.api.client import Client, GraphQLError
from tests.api.gql import REVOKE
from tests.hooks.conftest import Owner
from tests.hooks.runner import ISSUE_RUNNER, TASK, person, runner_event
from tests.servers import Server

ME = "{ me { userId role sessionId } }"
TASKS = "{ tasks { id title project } }"
TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id completedAt } }"
CHANNELS = "{ notificationChannels { id } }"


def folder() -> str:
    return f"/home/ann/src/shop-{uuid.uuid4().hex[:6]}"


async def test_a_person_issues_a_runner_token_that_acts_for_them(server: Server, owner: Owner) -> None:
    runner = Client(server.base_url, owner.runner_token)
    try:
        me = (await runner.execute(ME))["me"]
    finally:
        await runner.aclose()
    assert me == {"userId": owner.user_id, "role": "runner", "sessionId": None}


@pytest.mark.parametrize("label", ["", "   ", "a\nb", "x" * 201], ids=["empty", "blank", "lf", "long"])
async def test_a_label_that_cannot_be_a_name_is_refused(server: Server, owner: Owner, label: str) -> None:
    client = Client(server.base_url, owner.token)
    try:
        with pytest.raises(GraphQLError) as err:
            await client.execute(ISSUE_RUNNER, {"l": label})
    finally:
        await client.aclose()
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert err.value.errors[0]["message"].startswith("label: ")


async def test_first_sight_makes_a_running_session_in_a_task_named_for_the_folder_granted_to_the_person(
    server: Server, owner: Owner, runner: Client
) -> None:
    project = folder()
    session = await runner_event(runner, "claude-1", project, "SESSION_START")
    assert session["state"] == "RUNNING"
    assert session["isPrimary"] is True
    mine = Client(server.base_url, owner.token)
    try:
        task = (await mine.execute(TASK, {"id": session["taskId"]}))["task"]
    finally:
        await mine.aclose()
    assert task == {
        "id": session["taskId"],
        "title": project.rsplit("/", 1)[1],
        "project": project,
        "primarySessionId": session["id"],
    }


async def test_one_client_session_is_one_session_and_one_folder_one_task(runner: Client) -> None:
    project, other = folder(), folder()
    first = await runner_event(runner, "claude-a", project, "SESSION_START")
    again = await runner_event(runner, "claude-a", project, "USER_PROMPT_SUBMIT")
    later = await runner_event(runner, "claude-b", project, "SESSION_START")
    elsewhere = await runner_event(runner, "claude-c", other, "SESSION_START")
    assert again["id"] == first["id"]
    assert later["id"] != first["id"]
    assert later["taskId"] == first["taskId"]
    assert elsewhere["taskId"] != first["taskId"]
    listed = {t["id"]: t["project"] for t in (await runner.execute(TASKS))["tasks"]}
    assert listed == {first["taskId"]: project, elsewhere["taskId"]: other}


async def test_hooks_that_see_a_new_session_at_once_agree_on_one_session_and_one_task(runner: Client) -> None:
    project = folder()
    same = await asyncio.gather(
        *(runner_event(runner, "claude-race", project, "SESSION_START") for _ in range(8))
    )
    others = await asyncio.gather(
        *(runner_event(runner, f"claude-race-{i}", project, "USER_PROMPT_SUBMIT") for i in range(6))
    )
    assert len({s["id"] for s in same}) == 1
    assert len({s["taskId"] for s in [*same, *others]}) == 1
    assert len({s["id"] for s in others}) == 6
    listed = [t for t in (await runner.execute(TASKS))["tasks"] if t["project"] == project]
    assert len(listed) == 1


async def test_a_prompt_opens_a_turn_and_stop_completes_it(runner: Client) -> None:
    project = folder()
    session = await runner_event(runner, "claude-turns", project, "USER_PROMPT_SUBMIT")
    (turn,) = (await runner.execute(TURNS, {"s": session["id"]}))["sessionTurns"]
    assert turn["completedAt"] is None
    await runner_event(runner, "claude-turns", project, "STOP")
    (done,) = (await runner.execute(TURNS, {"s": session["id"]}))["sessionTurns"]
    assert done["id"] == turn["id"]
    assert done["completedAt"] is not None
    # A Stop with no open turn (hooks installed mid-session) changes nothing.
    await runner_event(runner, "claude-turns", project, "STOP")
    assert (await runner.execute(TURNS, {"s": session["id"]}))["sessionTurns"] == [done]


async def test_a_session_that_ended_comes_back_as_a_new_session_of_the_same_task(runner: Client) -> None:
    project = folder()
    first = await runner_event(runner, "claude-resumed", project, "SESSION_START")
    ended = await runner_event(runner, "claude-resumed", project, "SESSION_END")
    assert (ended["id"], ended["state"]) == (first["id"], "COMPLETED")
    # Ending it again changes nothing; it is not made anew to be ended.
    assert (await runner_event(runner, "claude-resumed", project, "SESSION_END"))["id"] == first["id"]
    back = await runner_event(runner, "claude-resumed", project, "SESSION_START")
    assert back["id"] != first["id"]
    assert (back["taskId"], back["state"]) == (first["taskId"], "RUNNING")


async def test_the_end_of_a_session_never_seen_makes_nothing(runner: Client) -> None:
    before = await runner.execute(TASKS)
    data = await runner.execute(
        'mutation { runnerEvent(clientSessionId: "never", project: "/src/x", event: SESSION_END) { id } }'
    )
    assert data == {"runnerEvent": None}
    assert await runner.execute(TASKS) == before


@pytest.mark.parametrize(
    ("client_session_id", "project", "field"),
    [
        ("", "/src/a", "clientSessionId"),
        ("a\x1bb", "/src/a", "clientSessionId"),
        ("x" * 201, "/src/a", "clientSessionId"),
        ("claude-bad", "  ", "project"),
        ("claude-bad", "/src/a\nb", "project"),
        ("claude-bad", "/" + "x" * 1000, "project"),
    ],
    ids=["empty-id", "esc-id", "long-id", "blank-project", "lf-project", "long-project"],
)
async def test_bad_hook_input_is_refused_and_nothing_is_made(
    runner: Client, client_session_id: str, project: str, field: str
) -> None:
    before = await runner.execute(TASKS)
    with pytest.raises(GraphQLError) as err:
        await runner_event(runner, client_session_id, project, "SESSION_START")
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert err.value.errors[0]["message"].startswith(f"{field}: ")
    assert await runner.execute(TASKS) == before


async def test_a_runner_reads_only_what_it_made(server: Server, admin: Client, owner: Owner) -> None:
    runner = Client(server.base_url, owner.runner_token)
    try:
        made = await runner_event(runner, "claude-own", folder(), "SESSION_START")
        # The person's other work (a task granted to them) stays out of the runner's sight.
        granted = (await admin.execute('mutation { createTask(title: "theirs") { id } }'))["createTask"]["id"]
        await admin.execute(
            "mutation($u: ID!, $t: ID!) { grantTask(userId: $u, taskId: $t) }",
            {
                "u": owner.user_id,
                "t": granted,
            },
        )
        assert [t["id"] for t in (await runner.execute(TASKS))["tasks"]] == [made["taskId"]]
        assert (await runner.execute(TASK, {"id": granted}))["task"] is None
        for document in ("{ users { id } }", CHANNELS):
            with pytest.raises(GraphQLError) as err:
                await runner.execute(document)
            assert err.value.codes == ["FORBIDDEN"]
    finally:
        await runner.aclose()


async def test_a_revoked_runner_token_is_refused(server: Server, admin: Client, owner: Owner) -> None:
    runner = Client(server.base_url, owner.runner_token)
    try:
        await runner_event(runner, "claude-revoked", folder(), "SESSION_START")
        assert (await admin.execute(REVOKE, {"id": owner.runner_id}))["revokeToken"] is True
        response = await runner.raw(TASKS)
    finally:
        await runner.aclose()
    assert response.status_code == 401


async def test_support_staff_who_write_nothing_issue_no_runner_token(server: Server, admin: Client) -> None:
    _, token = await person(admin, role="support")
    client = Client(server.base_url, token)
    try:
        with pytest.raises(GraphQLError) as err:
            await client.execute(ISSUE_RUNNER, {"l": "laptop"})
    finally:
        await client.aclose()
    assert err.value.codes == ["FORBIDDEN"]
