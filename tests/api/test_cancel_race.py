"""Cancel and respond over the API, in both orders, on both dialects, for a question and a permission
request alike: a cancel that committed first leaves the answer stale (S15); a claimed response is
confirmed whatever cancel comes after it (S24).

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
from tests.api.client import Client
from tests.api.kinds import API_KINDS, ApiKind
from tests.api.test_clarification_api import CANCEL, session
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


async def asked(kind: ApiKind, sub: Any) -> str:
    first = (await sub.next())[kind.asking]
    pending_id, state = kind.asked(first)
    assert state == "ACTIVE_LIVE"
    return pending_id


@pytest.mark.scenario("S15")
@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_an_answer_to_a_request_cancelled_first_gets_its_conflict_at_once_and_prompts_nobody(
    pair: tuple[Server, Server], kind: ApiKind
) -> None:
    a, _ = pair
    async with agent_and_user(pair) as (agent, user, db):
        _, session_id = await session(user)
        async with kind.ask_live(agent, session_id) as sub:
            pending_id = await asked(kind, sub)
            pause(a)  # the waiter's process can confirm nothing from here on
            try:
                assert (await kind.read(user, pending_id))["state"] == "ACTIVE_LIVE"
                assert (await user.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is True
                cancelled = await rows(db, pending_id)
                assert [r["status"] for r in cancelled] == ["cancelled"]
                # The stale answer gets the closed request at once. Had it claimed, it would have
                # handed the claim to the stopped process and waited on it.
                late = await kind.answer(user, pending_id)
            finally:
                resume(a)
            assert late["__typename"] == "ClarificationConflict"
            assert late["reason"] == "TERMINAL"
            view = await kind.read(user, pending_id)
            assert view["state"] == "TERMINAL"
            if kind.is_permission:
                assert view["decision"] is None
            else:
                assert [(q["status"], q["response"]) for q in view["questions"]] == [("CANCELLED", None)]
            # It wrote nothing: no answer and no delivery intent, so nothing can resume the agent.
            assert await rows(db, pending_id) == cancelled
            assert not any("response" in r or "response_delivery_pending" in r for r in cancelled)
            # The agent hears the cancellation, never an answer.
            assert (await sub.next())[kind.asking] == kind.closed(pending_id, "CANCELLED")


@pytest.mark.scenario("S24")
@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_a_claimed_response_is_confirmed_even_when_a_cancel_arrives_before_the_confirmation(
    pair: tuple[Server, Server], kind: ApiKind
) -> None:
    a, _ = pair
    async with agent_and_user(pair) as (agent, user, db):
        _, session_id = await session(user)
        async with kind.ask_live(agent, session_id) as sub:
            pending_id = await asked(kind, sub)
            pause(a)  # the hand-off waits on the bus until the waiter's process runs again
            try:
                responding = asyncio.create_task(kind.answer(user, pending_id))
                while (await kind.read(user, pending_id))["state"] != "DELIVERY_CLAIMED":
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
            assert result["__typename"] == kind.responded, result
            assert result["resumed"] is False
            assert result["request" if kind.is_permission else "bundle"]["state"] == "TERMINAL"
            assert (await sub.next())[kind.asking] == kind.answered(pending_id)
        stored = await rows(db, pending_id)
        assert [r["status"] for r in stored] == ["answered"]
        assert stored[0]["response"] == claimed[0]["response"]
        assert "response_delivery_pending" not in stored[0]
        assert stored[0]["delivery_claim_id"] == claimed[0]["delivery_claim_id"]
        assert (await user.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is False
