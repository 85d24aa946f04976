"""Cancel racing respond over the API, in both orders, on both dialects (scenario S24).

Two server processes share one database and a Redis bus: the agent waits on A, the person answers
and cancels through B. Stopping A (SIGSTOP) holds its waiter still without killing it, so B sees a
live waiter whose hand-off cannot be confirmed yet: the one window in which each order is decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from backend.db.engine import Database
from tests.api.client import Client, Subscription
from tests.api.test_clarification_api import ASK, CANCEL, CLARIFICATION, QUESTION, YES, respond, session
from tests.conftest import redis_url
from tests.lifecycle.support import rows
from tests.servers import ADMIN_TOKEN, Server, server_pair

# The responder must wait out neither bound in this test: a confirmation that does not come in 10
# minutes or a heartbeat that goes stale in 30 s would only ever show up as a hanging request.
ENV = {"TURNWISE_LIVE_CONFIRMATION_SECONDS": "600", "TURNWISE_HEARTBEAT_SECONDS": "10"}


@pytest.fixture
def pair(dialect: str, request: pytest.FixtureRequest) -> Iterator[tuple[Server, Server]]:
    if dialect == "postgresql":
        request.getfixturevalue("pg_url")  # skips or fails when PostgreSQL is unreachable
    with server_pair(dialect, broadcast_url=redis_url(), env=ENV) as servers:
        yield servers


def pause(server: Server) -> None:
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)


def resume(server: Server) -> None:
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGCONT)


async def state(client: Client, pending_id: str) -> Any:
    return (await client.execute(CLARIFICATION, {"p": pending_id}))["clarification"]


@contextlib.asynccontextmanager
async def agent_and_user(pair: tuple[Server, Server]) -> AsyncIterator[tuple[Client, Client, Database]]:
    """The agent's client on A; the person's client and the database, through B."""
    a, b = pair
    agent, user = Client(a.base_url, ADMIN_TOKEN), Client(b.base_url, ADMIN_TOKEN)
    db = Database(b.database_url)
    try:
        yield agent, user, db
    finally:
        await agent.aclose()
        await user.aclose()
        await db.dispose()


async def asked(sub: Subscription) -> str:
    first = (await sub.next())["askClarification"]
    assert first["__typename"] == "ClarificationAsked"
    assert first["bundle"]["state"] == "ACTIVE_LIVE"
    return str(first["bundle"]["pendingId"])


@pytest.mark.scenario("S24")
async def test_cancel_that_wins_before_the_claim_gives_the_responder_its_answer_at_once(
    pair: tuple[Server, Server],
) -> None:
    a, _ = pair
    async with agent_and_user(pair) as (agent, user, db):
        _, session_id = await session(user)
        async with agent.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            pending_id = await asked(sub)
            pause(a)  # the waiter's process can confirm nothing from here on
            try:
                assert (await state(user, pending_id))["state"] == "ACTIVE_LIVE"
                assert (await user.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is True
                cancelled = await rows(db, pending_id)
                # The responder continues after the cancel: it gets the closed bundle at once. Had it
                # claimed, it would have handed the claim to the stopped process and waited on it.
                late = await respond(user, pending_id, YES)
            finally:
                resume(a)
            assert late["__typename"] == "ClarificationConflict"
            assert late["reason"] == "TERMINAL"
            assert late["winner"]["state"] == "TERMINAL"
            assert [q["status"] for q in late["winner"]["questions"]] == ["CANCELLED"]
            assert late["winner"]["questions"][0]["response"] is None
            # It wrote nothing: no answer, no delivery intent, the cancelled rows exactly as they were.
            assert await rows(db, pending_id) == cancelled
            assert not any("response" in r or "response_delivery_pending" in r for r in cancelled)
            # The agent hears the cancellation, never an answer.
            closed = (await sub.next())["askClarification"]
            assert closed == {
                "__typename": "ClarificationClosed",
                "pendingId": pending_id,
                "status": "CANCELLED",
            }


@pytest.mark.scenario("S24")
async def test_a_claimed_response_is_confirmed_even_when_a_cancel_arrives_before_the_confirmation(
    pair: tuple[Server, Server],
) -> None:
    a, _ = pair
    async with agent_and_user(pair) as (agent, user, db):
        _, session_id = await session(user)
        async with agent.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            pending_id = await asked(sub)
            pause(a)  # the hand-off waits on the bus until the waiter's process runs again
            try:
                responding = asyncio.create_task(respond(user, pending_id, YES))
                while (await state(user, pending_id))["state"] != "DELIVERY_CLAIMED":
                    assert not responding.done(), responding.result()
                    await asyncio.sleep(0.02)
                claimed = await rows(db, pending_id)
                # Response delivery won: the later cancel cannot take the bundle from it.
                assert (await user.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is False
                assert await rows(db, pending_id) == claimed
                assert not responding.done()
            finally:
                resume(a)
            result = await responding
            assert result["__typename"] == "ClarificationResponded"
            assert result["resumed"] is False
            assert result["bundle"]["state"] == "TERMINAL"
            answered = (await sub.next())["askClarification"]
            assert answered == {
                "__typename": "ClarificationAnswered",
                "pendingId": pending_id,
                "answers": [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"], "customText": None}],
            }
        stored = await rows(db, pending_id)
        assert [r["status"] for r in stored] == ["answered"]
        assert stored[0]["response"]["selected_option_ids"] == ["q1_opt2"]
        assert "response_delivery_pending" not in stored[0]
        assert stored[0]["delivery_claim_id"] == claimed[0]["delivery_claim_id"]
        assert (await user.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is False
