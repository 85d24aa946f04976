"""A live answer handed to its waiter but never durably confirmed (scenario S22), on both dialects,
for a question and a permission request alike.

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
from tests.api.kinds import API_KINDS, ApiKind
from tests.api.test_clarification_api import session
from tests.lifecycle.support import rows
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
def crash_db(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")  # skips or fails when PostgreSQL is unreachable
    url = fresh_database(request.param)
    yield url
    drop_database(url)


async def until_closed(sub: Subscription, asking: str) -> list[str]:
    """Every result of the agent's ask (field `asking`) it receives until its connection drops."""
    seen: list[str] = []
    try:
        while True:
            data = await sub.next(timeout=30)
            seen.append(data[asking]["__typename"])
    except (ConnectionError, StopAsyncIteration):
        return seen


@pytest.mark.scenario("S22")
@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_an_enqueued_answer_is_withheld_until_confirmed_and_restart_restores_the_claim(
    crash_db: str, kind: ApiKind
) -> None:
    db = Database(crash_db)
    crashing = Server(crash_db, env={"TURNWISE_FAULT_POINTS": "before_confirm"}).start()
    client = Client(crashing.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await session(client)
        async with kind.ask_live(client, session_id) as sub:
            pending_id, _ = kind.asked((await sub.next())[kind.asking])
            responding = asyncio.create_task(kind.answer(client, pending_id))
            # The process ends at `before_confirm`: only a waiter that took the hand-off gets there.
            assert await until_closed(sub, kind.asking) == []
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
        view = await kind.read(client, pending_id)
        assert view["state"] == "ACTIVE_DETACHED"
        assert kind.unanswered(view)
        # The agent reconnects: same request, live again, and the same answer now arrives once.
        async with kind.ask_live(client, session_id) as sub:
            assert kind.asked((await sub.next())[kind.asking]) == (pending_id, "ACTIVE_LIVE")
            result = await kind.answer(client, pending_id)
            assert result["__typename"] == kind.responded, result
            assert (await sub.next())[kind.asking] == kind.answered(pending_id)
        final = await rows(db, pending_id)
        assert final[0]["status"] == "answered"
        assert "response_delivery_pending" not in final[0]
    finally:
        await client.aclose()
        restarted.stop()
        await db.dispose()
