"""Text that cannot be stored faithfully is refused up front, over HTTP and WebSocket alike; a stored
name (a title, a step, a label) holds no control character, so it can never break a log line."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.api.client import Client, GraphQLError
from tests.api.gql import CREATE_TASK, CREATE_USER, GRANT, ISSUE
from tests.api.test_clarification_api import ADVANCE, ASK, QUESTION
from tests.api.test_foundation_api import MESSAGES, new_session
from tests.servers import Server


@pytest.mark.parametrize("bad", ["a\x00b", "x\ud800y"], ids=["nul", "lone surrogate"])
async def test_an_agent_question_with_unstorable_text_is_refused_naming_the_field(
    admin: Client, bad: str
) -> None:
    _, session_id = await new_session(admin)
    question = {"prompt": bad, "options": [{"label": "a"}, {"label": "b"}]}
    with pytest.raises(GraphQLError) as err:
        async with admin.subscribe(ASK, {"s": session_id, "q": [question], "t": 1}) as sub:
            await sub.next()
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert err.value.errors[0]["message"].startswith("$.q[0].prompt: ")
    assert (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"] == []


# One of each kind a name refuses: C0 (line feed, carriage return, tab, escape), DEL, C1 (NEL, CSI)
# and the Unicode line and paragraph separators, which many viewers also break lines at.
CONTROLS = {
    "lf": "\n",
    "cr": "\r",
    "tab": "\t",
    "esc": "\x1b",
    "del": "\x7f",
    "nel": "\x85",
    "csi": "\x9b",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
}
each_control = pytest.mark.parametrize("char", list(CONTROLS.values()), ids=list(CONTROLS))

TASKS = "{ tasks { id title workflowStep } }"
TASK = "query($id: ID!) { task(id: $id) { title workflowStep } }"
USERS = "{ users { id name role } }"


def assert_refused(err: pytest.ExceptionInfo[GraphQLError], field: str) -> None:
    assert err.value.codes == ["BAD_USER_INPUT"]
    message = err.value.errors[0]["message"]
    assert message.startswith(f"{field}: ")
    # The refusal names the field, never repeats the value: it is what a log line would print.
    assert not any(c in message for c in CONTROLS.values())


async def granted_user(admin: Client, server: Server, task_id: str) -> Client:
    """A client of a new `user` granted the task: the role that found the forgery."""
    user_id = (await admin.execute(CREATE_USER, {"n": f"u-{uuid.uuid4().hex[:8]}", "r": "user"}))[
        "createUser"
    ]["id"]
    token = (await admin.execute(ISSUE, {"u": user_id, "s": None}))["issueToken"]["token"]
    await admin.execute(GRANT, {"u": user_id, "t": task_id})
    return Client(server.base_url, token)


@each_control
async def test_a_task_title_with_a_control_character_is_refused_and_no_task_is_made(
    admin: Client, char: str
) -> None:
    before = await admin.execute(TASKS)
    with pytest.raises(GraphQLError) as err:
        await admin.execute(CREATE_TASK, {"t": f"fix{char}it"})
    assert_refused(err, "title")
    assert await admin.execute(TASKS) == before


@each_control
async def test_a_user_name_with_a_control_character_is_refused_and_no_user_is_made(
    admin: Client, char: str
) -> None:
    before = await admin.execute(USERS)
    with pytest.raises(GraphQLError) as err:
        await admin.execute(CREATE_USER, {"n": f"ann{char}{uuid.uuid4().hex[:8]}", "r": "user"})
    assert_refused(err, "name")
    assert await admin.execute(USERS) == before


@each_control
async def test_a_workflow_step_with_a_control_character_is_refused_and_the_step_stays(
    admin: Client, server: Server, char: str
) -> None:
    task_id = (await admin.execute(CREATE_TASK, {"t": "a task"}))["createTask"]["id"]
    user = await granted_user(admin, server, task_id)
    try:
        with pytest.raises(GraphQLError) as err:
            await user.execute(ADVANCE, {"t": task_id, "to": f"done{char}review"})
    finally:
        await user.aclose()
    assert_refused(err, "toStep")
    assert (await admin.execute(TASK, {"id": task_id}))["task"]["workflowStep"] == "todo"


@pytest.mark.parametrize(
    ("question", "field"),
    [
        (lambda c: {**QUESTION, "title": f"db{c}choice"}, "questions[0].title"),
        (
            lambda c: {**QUESTION, "options": [{"label": "SQLite"}, {"label": f"Postgre{c}SQL"}]},
            "questions[0].options[1].label",
        ),
    ],
    ids=["question title", "option label"],
)
@each_control
async def test_a_question_title_or_option_label_with_a_control_character_is_refused_and_nothing_is_asked(
    admin: Client, question: Any, field: str, char: str
) -> None:
    _, session_id = await new_session(admin)
    with pytest.raises(GraphQLError) as err:
        async with admin.subscribe(ASK, {"s": session_id, "q": [question(char)], "t": 1}) as sub:
            await sub.next()
    assert_refused(err, field)
    assert (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"] == []


async def test_a_step_name_forging_an_access_log_line_is_refused_and_the_forgery_never_reaches_the_log(
    admin: Client, server: Server
) -> None:
    task_id = (await admin.execute(CREATE_TASK, {"t": "a task"}))["createTask"]["id"]
    intruder = f"intruder-{uuid.uuid4().hex[:8]}"
    forged = (
        f"2026-12-01 09:00:00,000 INFO turnwise.access task granted event=access.granted "
        f"user_id={intruder} task_id={task_id}"
    )
    user = await granted_user(admin, server, task_id)
    try:
        with pytest.raises(GraphQLError) as err:
            await user.execute(ADVANCE, {"t": task_id, "to": f"done\n{forged}"})
    finally:
        await user.aclose()
    assert_refused(err, "toStep")
    assert (await admin.execute(TASK, {"id": task_id}))["task"]["workflowStep"] == "todo"
    await asyncio.sleep(0.2)  # let the server flush its log
    log = server.log()
    # The refusal itself is logged (so the log is flushed this far), as one line without the value.
    assert "code=BAD_USER_INPUT path=advanceTask" in log
    assert intruder not in log


async def test_a_name_with_spaces_punctuation_and_letters_of_any_script_is_still_accepted(
    admin: Client,
) -> None:
    title = "Überprüfen: 検証 — «ready» ✓"
    task_id = (await admin.execute(CREATE_TASK, {"t": title}))["createTask"]["id"]
    assert (await admin.execute(TASK, {"id": task_id}))["task"]["title"] == title
