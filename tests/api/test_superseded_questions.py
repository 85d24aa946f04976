"""Superseded questions stay inert: deleting a newer turn's messages never hands the session back to an
older question (scenario S03); and an agent still waiting live on a question a newer turn superseded
is told it closed, not that it detached (a live wait: no numbered scenario covers it)."""

from __future__ import annotations

import pytest

from tests.api.client import Client
from tests.api.gql import DELETE, MESSAGES, POST, START
from tests.api.test_clarification_api import (
    ACTIVE,
    ADVANCE,
    ASK,
    CLARIFICATION,
    QUESTION,
    YES,
    respond,
    session,
)

TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id completedAt } }"
OTHER = {"prompt": "Which cache?", "options": [{"label": "Redis"}, {"label": "None"}]}


async def test_a_waiting_question_a_newer_turn_superseded_ends_closed_not_detached(admin: Client) -> None:
    _, session_id = await session(admin)
    async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.2}) as sub:
        older = (await sub.next())["askClarification"]["bundle"]
        assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
    async with admin.subscribe(ASK, {"s": session_id, "q": [OTHER]}) as waiting:
        newer = (await waiting.next())["askClarification"]["bundle"]
        assert newer["state"] == "ACTIVE_LIVE"
        # Answering the detached question resumes the agent in a newer turn, which supersedes the
        # question it is still waiting on: that wait ends closed (the question takes no answer now).
        answered = await respond(admin, older["pendingId"], YES)
        assert answered["__typename"] == "ClarificationResponded"
        assert (await waiting.next(timeout=30))["askClarification"] == {
            "__typename": "ClarificationClosed",
            "pendingId": newer["pendingId"],
            "status": "PENDING",
        }
    bundle = (await admin.execute(CLARIFICATION, {"p": newer["pendingId"]}))["clarification"]
    assert bundle["state"] == "SUPERSEDED_HISTORY"
    assert [q["status"] for q in bundle["questions"]] == ["PENDING"]
    assert (await respond(admin, newer["pendingId"], YES))["reason"] == "SUPERSEDED"


@pytest.mark.scenario("S03")
async def test_deleting_every_message_of_the_newer_turn_keeps_it_current_and_the_older_question_inert(
    admin: Client,
) -> None:
    task_id, session_id = await session(admin)
    async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.2}) as sub:
        older = (await sub.next())["askClarification"]["bundle"]
        assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
    newer = (await admin.execute(START, {"s": session_id}))["startTurn"]["id"]
    posted = [
        (await admin.execute(POST, {"s": session_id, "c": f"newer work {i}", "k": "message"}))["postMessage"][
            "id"
        ]
        for i in range(2)
    ]
    for message_id in posted:
        assert (await admin.execute(DELETE, {"m": message_id}))["deleteMessage"] is True
    messages = (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"]
    assert not [m for m in messages if m["turnId"] == newer], "every message of the newer turn is gone"
    # The newer turn stays, open and current: the next message still lands in it.
    turns = (await admin.execute(TURNS, {"s": session_id}))["sessionTurns"]
    assert [t["id"] for t in turns][-1] == newer
    assert turns[-1]["completedAt"] is None
    probe = (await admin.execute(POST, {"s": session_id, "c": "still here", "k": "message"}))["postMessage"]
    assert (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"][-1] == {
        "id": probe["id"],
        "kind": "message",
        "content": "still here",
        "turnId": newer,
    }
    # The older question is inert history: visible, never active again, and it takes no answer.
    assert older["turnId"] != newer
    bundle = (await admin.execute(CLARIFICATION, {"p": older["pendingId"]}))["clarification"]
    assert bundle["state"] == "SUPERSEDED_HISTORY"
    assert [q["status"] for q in bundle["questions"]] == ["PENDING"]
    sessions = (await admin.execute(ACTIVE, {"t": task_id}))["taskSessions"]
    assert sessions == [{"id": session_id, "pendingAction": None, "activeClarification": None}]
    late = await respond(admin, older["pendingId"], YES)
    assert late["__typename"] == "ClarificationConflict"
    assert late["reason"] == "SUPERSEDED"
    advanced = (await admin.execute(ADVANCE, {"t": task_id, "to": "review"}))["advanceTask"]
    assert advanced == {"__typename": "TaskAdvanced", "task": {"workflowStep": "review"}}
