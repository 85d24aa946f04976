"""S05 on the server: a new question's ADDED `sessionEvents` event carries the session's projection,
advanced to CLARIFICATION, so a client holding an explicit clean projection needs nothing else to
show the question as answerable."""

from __future__ import annotations

from typing import Any

import pytest

from frontend_py.kit import revision
from tests.api.client import Client, Subscription
from tests.api.gql import POST, running_session
from tests.api.test_clarification_api import ASK, QUESTION

EVENTS = """subscription($s: ID!) { sessionEvents(sessionId: $s) {
  kind messageId message { id kind turnId clarification { pendingId status } }
  projection { sessionId pendingAction revision { epoch sequence } } } }"""


async def attached(admin: Client, session_id: str, sub: Subscription) -> dict[str, Any]:
    """sessionEvents sends no snapshot: post until an event arrives; that event (a clean one)."""
    for _ in range(20):
        await admin.execute(POST, {"s": session_id, "c": "working", "k": "message"})
        try:
            return dict((await sub.next(timeout=0.5))["sessionEvents"])
        except TimeoutError:
            continue
    raise AssertionError("sessionEvents never attached")


@pytest.mark.scenario("S05")
async def test_a_new_questions_added_event_carries_the_clarification_projection(admin: Client) -> None:
    _, session_id = await running_session(admin)
    async with admin.subscribe(EVENTS, {"s": session_id}) as events:
        clean = await attached(admin, session_id, events)
        # What the client holds: an explicit clean projection.
        assert clean["projection"]["pendingAction"] is None
        async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as asking:
            asked = (await asking.next())["askClarification"]
            assert asked["__typename"] == "ClarificationAsked"
            pending_id = asked["bundle"]["pendingId"]
            event = (await events.next())["sessionEvents"]
            while event["kind"] != "ADDED" or event["message"]["kind"] != "clarification_request":
                event = (await events.next())["sessionEvents"]  # a late event of the warm-up posts
    assert event["message"]["clarification"] == {"pendingId": pending_id, "status": "PENDING"}
    assert event["message"]["turnId"] == asked["bundle"]["turnId"]
    projection = event["projection"]
    assert projection["sessionId"] == session_id
    assert projection["pendingAction"] == "CLARIFICATION"
    # Newer than the clean one the client holds, so the client's revision merge takes it.
    assert revision.compare(projection["revision"], clean["projection"]["revision"]) > 0
