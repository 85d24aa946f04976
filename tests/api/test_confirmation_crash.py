"""A live answer handed to its waiter but never durably confirmed (scenario S22), on both dialects.

The `before_confirm` fault point ends the server right where the waiter has taken the hand-off off
its queue and is about to write the confirmation: the agent must not have the answer, and the next
start restores the claim so the same answer can be given again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from backend import faults
from backend.db.engine import Database
from tests.api.client import Client, Subscription
from tests.api.test_clarification_api import ASK, CLARIFICATION, QUESTION, YES, respond, session
from tests.lifecycle.support import rows
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
def crash_db(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")  # skips or fails when PostgreSQL is unreachable
    url = fresh_database(request.param)
    yield url
    drop_database(url)


async def until_closed(sub: Subscription) -> list[str]:
    """Every `askClarification` result the agent receives until its connection drops."""
    seen: list[str] = []
    try:
        while True:
            data = await sub.next(timeout=30)
            seen.append(data["askClarification"]["__typename"])
    except (ConnectionError, StopAsyncIteration):
        return seen


@pytest.mark.scenario("S22")
async def test_an_enqueued_answer_is_withheld_until_confirmed_and_restart_restores_the_claim(
    crash_db: str,
) -> None:
    db = Database(crash_db)
    crashing = Server(crash_db, env={"TURNWISE_FAULT_POINTS": "before_confirm"}).start()
    client = Client(crashing.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await session(client)
        async with client.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            pending_id = (await sub.next())["askClarification"]["bundle"]["pendingId"]
            responding = asyncio.create_task(respond(client, pending_id, YES))
            # The process ends at `before_confirm`: only a waiter that took the hand-off gets there.
            assert await until_closed(sub) == []
            with pytest.raises(httpx.HTTPError):
                await responding
        assert crashing.proc is not None
        assert crashing.proc.wait(10) == faults.CRASH_EXIT_CODE, crashing.log()
        # The claim is durable but was never confirmed: its delivery intent is still set.
        stranded = await rows(db, pending_id)
        assert stranded[0]["status"] == "answered"
        assert stranded[0]["response_delivery_pending"]
    finally:
        await client.aclose()
        crashing.kill()
    restarted = Server(crash_db).start()
    client = Client(restarted.base_url, ADMIN_TOKEN)
    try:
        restored = await rows(db, pending_id)
        assert restored[0]["status"] == "pending"
        assert not {"response", "response_delivery_pending", "delivery_claim_id"} & restored[0].keys()
        bundle = (await client.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert bundle["state"] == "ACTIVE_DETACHED"
        assert [(q["status"], q["response"]) for q in bundle["questions"]] == [("PENDING", None)]
        # The agent reconnects: same bundle, live again, and the same answer now arrives once.
        async with client.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            again = (await sub.next())["askClarification"]["bundle"]
            assert again["pendingId"] == pending_id
            assert again["state"] == "ACTIVE_LIVE"
            result = await respond(client, pending_id, YES)
            assert result["__typename"] == "ClarificationResponded"
            answered = (await sub.next())["askClarification"]
            assert answered == {
                "__typename": "ClarificationAnswered",
                "pendingId": pending_id,
                "answers": [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"], "customText": None}],
            }
        final = await rows(db, pending_id)
        assert final[0]["status"] == "answered"
        assert "response_delivery_pending" not in final[0]
    finally:
        await client.aclose()
        restarted.stop()
        await db.dispose()
