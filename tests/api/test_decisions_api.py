"""The audit trail over real servers: every settled pending action reads as who decided what, newest
first, for both kinds and every outcome, a rule's allow and an edited allow included."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.api.client import Client, GraphQLError
from tests.api.gql import GRANT, SET_STATE, START, running_session, token_for
from tests.api.kinds import API_CLARIFICATION, API_KINDS, API_PERMISSION, ASK_PERMISSION, BASH, ApiKind
from tests.api.test_clarification_api import ASK, CANCEL, QUESTION, YES, respond
from tests.servers import Server

DECISIONS = """query($t: ID, $s: ID, $n: Int) { decisions(taskId: $t, sessionId: $s, first: $n) {
  pendingId kind taskId sessionId askedAt decidedAt decidedBy outcome summary edited message updatedInput
  ruleId } }"""
DECIDE = """mutation($p: ID!, $b: PermissionBehavior!, $i: JSON, $m: String, $r: Boolean!) {
  respondToPermission(pendingId: $p, behavior: $b, updatedInput: $i, message: $m, remember: $r) {
    __typename } }"""


async def trail(
    client: Client, *, task: str | None = None, session: str | None = None
) -> list[dict[str, Any]]:
    found = await client.execute(DECISIONS, {"t": task, "s": session, "n": None})
    return list(found["decisions"])


async def named_person(server: Server, admin: Client, task_id: str) -> tuple[str, Client]:
    """A user granted the task: (their name, a client of theirs)."""
    name = f"ada-{uuid.uuid4().hex[:6]}"
    user_id, token = await token_for(admin, "user", name=name)
    await admin.execute(GRANT, {"u": user_id, "t": task_id})
    return name, Client(server.base_url, token)


async def test_a_persons_answer_and_skip_read_with_their_name_and_the_answer(
    server: Server, admin: Client
) -> None:
    task_id, session_id = await running_session(admin)
    name, ada = await named_person(server, admin, task_id)
    try:
        answered = await API_CLARIFICATION.detached(admin, session_id)
        await respond(ada, answered, YES)
        await admin.execute(START, {"s": session_id})
        skipped = await API_CLARIFICATION.detached(admin, session_id)
        await respond(ada, skipped, None, rejected=True)
        newest, older = await trail(ada, task=task_id)
    finally:
        await ada.aclose()
    assert (older["pendingId"], older["outcome"], older["decidedBy"]) == (answered, "ANSWERED", name)
    assert older["summary"] == "answered: PostgreSQL"
    assert (newest["pendingId"], newest["outcome"], newest["decidedBy"]) == (skipped, "SKIPPED", name)
    assert newest["summary"] == "skipped: Which database?"
    assert older["askedAt"] <= older["decidedAt"] <= newest["decidedAt"]
    assert {older["kind"], older["sessionId"], older["edited"], older["ruleId"]} == {
        "CLARIFICATION",
        session_id,
        False,
        None,
    }


async def test_allowed_edited_and_denied_requests_read_with_the_command_the_edit_and_the_reason(
    server: Server, admin: Client
) -> None:
    task_id, session_id = await running_session(admin)
    name, ada = await named_person(server, admin, task_id)
    edit = {"command": "alembic upgrade head --sql", "description": "dry run"}
    try:
        allowed = await API_PERMISSION.detached(admin, session_id)
        await ada.execute(DECIDE, {"p": allowed, "b": "ALLOW", "r": False})
        edited = await API_PERMISSION.detached(admin, session_id)
        await ada.execute(DECIDE, {"p": edited, "b": "ALLOW", "i": edit, "r": False})
        denied = await API_PERMISSION.detached(admin, session_id)
        await ada.execute(DECIDE, {"p": denied, "b": "DENY", "m": "not on staging", "r": False})
        got = {d["pendingId"]: d for d in await trail(ada, session=session_id)}
    finally:
        await ada.aclose()
    assert [d["pendingId"] for d in got.values()] == [denied, edited, allowed]
    assert got[allowed] | {"askedAt": None, "decidedAt": None} == {
        "pendingId": allowed,
        "kind": "PERMISSION",
        "taskId": task_id,
        "sessionId": session_id,
        "askedAt": None,
        "decidedAt": None,
        "decidedBy": name,
        "outcome": "ALLOWED",
        "summary": "allowed Bash: alembic upgrade head",
        "edited": False,
        "message": None,
        "updatedInput": None,
        "ruleId": None,
    }
    assert (got[edited]["outcome"], got[edited]["edited"], got[edited]["updatedInput"]) == (
        "ALLOWED",
        True,
        edit,
    )
    assert got[edited]["summary"] == "allowed Bash with an edit: alembic upgrade head --sql"
    assert (got[denied]["outcome"], got[denied]["message"]) == ("DENIED", "not on staging")
    assert got[denied]["summary"] == "denied Bash: alembic upgrade head"


async def test_a_rule_decided_allow_names_its_rule(admin: Client) -> None:
    task_id, session_id = await running_session(admin)
    first = await API_PERMISSION.detached(admin, session_id)
    await admin.execute(DECIDE, {"p": first, "b": "ALLOW", "r": True})
    async with admin.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": BASH}) as sub:
        decided = (await sub.next())["askPermission"]
    assert decided["__typename"] == "PermissionDecided"
    by_rule, by_person = await trail(admin, task=task_id)
    assert by_rule["pendingId"] == decided["pendingId"]
    assert by_rule["ruleId"] is not None
    assert (by_rule["outcome"], by_rule["decidedBy"]) == ("ALLOWED", f"rule {by_rule['ruleId']}")
    assert (by_person["pendingId"], by_person["decidedBy"]) == (first, "bootstrap")


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_superseded_and_expired_requests_were_decided_by_the_system(
    admin: Client, kind: ApiKind
) -> None:
    task_id, session_id = await running_session(admin)
    superseded = await kind.detached(admin, session_id)
    await admin.execute(START, {"s": session_id})
    assert await trail(admin, session=session_id) != []
    expired = await kind.detached(admin, session_id)
    assert [d["pendingId"] for d in await trail(admin, task=task_id)] == [superseded]  # the open one is not
    await admin.execute(SET_STATE, {"s": session_id, "st": "CANCELLED"})
    newest, older = await trail(admin, task=task_id)
    assert (newest["pendingId"], newest["outcome"], newest["decidedBy"]) == (expired, "EXPIRED", "system")
    assert (older["pendingId"], older["outcome"], older["decidedBy"]) == (superseded, "SUPERSEDED", "system")
    asked = "Bash: alembic upgrade head" if kind.is_permission else "Which database?"
    assert (older["summary"], newest["summary"]) == (f"superseded: {asked}", f"expired: {asked}")
    assert older["askedAt"] < older["decidedAt"]


async def test_a_cancelled_question_was_decided_by_the_system(admin: Client) -> None:
    task_id, session_id = await running_session(admin)
    async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
        pending_id = (await sub.next())["askClarification"]["bundle"]["pendingId"]
        assert (await admin.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is True
    (cancelled,) = await trail(admin, task=task_id)
    assert (cancelled["pendingId"], cancelled["outcome"], cancelled["decidedBy"]) == (
        pending_id,
        "CANCELLED",
        "system",
    )


async def test_the_trail_is_read_only_where_the_caller_may_read(server: Server, admin: Client) -> None:
    mine, my_session = await running_session(admin)
    theirs, their_session = await running_session(admin)
    for session_id in (my_session, their_session):
        pending_id = await API_CLARIFICATION.detached(admin, session_id)
        await respond(admin, pending_id, YES)
    _, ada = await named_person(server, admin, mine)
    try:
        assert {d["taskId"] for d in await trail(ada)} == {mine}
        for scope in ({"task": theirs}, {"session": their_session}):
            with pytest.raises(GraphQLError) as refused:
                await trail(ada, **scope)
            assert refused.value.codes == ["NOT_FOUND"]
        with pytest.raises(GraphQLError) as mismatched:
            await trail(ada, task=theirs, session=my_session)
        assert mismatched.value.codes == ["NOT_FOUND"]
    finally:
        await ada.aclose()
