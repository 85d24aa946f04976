"""PostgreSQL fails under a real `turnwise serve`, and comes back; the server is never restarted.

Each test runs one server on a database of a PostgreSQL cluster of the module's own, with agents
waiting live and people answering, and then breaks that cluster: a restart (`-m fast`), a stop, a
crash (`-m immediate`) under load, and a partition (every process of the cluster SIGSTOPped).
Asserted: every operation ends within a bound with a typed outcome (an answer, a retryable
`ClarificationDeliveryFailed`, an `UNAVAILABLE` error), never `INTERNAL`; nothing is lost or
delivered twice; no question stays claimed; `/readyz` and `/metrics` say what happened; and a plain
cycle works afterwards on the same server process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from backend.db.engine import Database
from backend.domain.lifecycle import CLAIM_KEY, INTENT_KEY
from tests.api.client import Client, GraphQLError
from tests.api.gql import PROJECTIONS, TASKS, running_session, token_for
from tests.bus.support import eventually
from tests.bus.test_bus_faults import (
    ANSWER,
    ASK,
    QUESTION,
    RESPOND,
    Stream,
    asked,
    converged,
    metric,
    new_session,
    outcomes,
)
from tests.dbfaults.support import PgCluster, pg_cluster
from tests.lifecycle.support import rows
from tests.servers import ADMIN_TOKEN, Server

ENV = {"TURNWISE_HEARTBEAT_SECONDS": "1", "TURNWISE_DB_POOL_SIZE": "5"}
# What a person waits at most for any outcome while the database is gone (the bound), with
# a margin for a loaded test machine.
OUTAGE_BOUND = 5.0 + 2.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    with pg_cluster() as c:
        yield c


@pytest.fixture(autouse=True)
def cluster_up(cluster: PgCluster) -> None:
    """Each test starts with the cluster up: one that failed midway does not fail the next ones."""
    cluster.ensure_running()


@contextlib.asynccontextmanager
async def served(
    cluster: PgCluster, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[Server, Client]]:
    url = await asyncio.to_thread(cluster.createdb, f"turnwise_{uuid.uuid4().hex[:10]}")
    server = Server(url, env={**ENV, **(env or {})})
    await asyncio.to_thread(server.start)
    admin = Client(server.base_url, ADMIN_TOKEN)
    try:
        yield server, admin
    finally:
        await admin.aclose()
        await asyncio.to_thread(server.stop)


async def respond(admin: Client, pending_id: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    result = await asyncio.wait_for(admin.execute(RESPOND, {"p": pending_id, "a": ANSWER}), 60)
    return dict(result["respondToClarification"]), time.monotonic() - started


async def ready(server: Server) -> int:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{server.base_url}/readyz", timeout=30)).status_code


async def stored_statuses(url: str, pending_id: str) -> list[str]:
    db = Database(url)
    try:
        return [str(r.get("status")) for r in await rows(db, pending_id)]
    finally:
        await db.dispose()


async def answer_and_read_fail_fast(admin: Client, pending_id: str) -> None:
    """While the database is gone: the answer is a retryable failure and a read is UNAVAILABLE,
    each within the bound."""
    result, took = await respond(admin, pending_id)
    assert result["__typename"] == "ClarificationDeliveryFailed", result
    assert result["retryable"] is True
    assert took < OUTAGE_BOUND, took
    started = time.monotonic()
    with pytest.raises(GraphQLError) as raised:
        await admin.execute(TASKS)
    assert raised.value.codes == ["UNAVAILABLE"], raised.value.errors
    assert time.monotonic() - started < OUTAGE_BOUND


async def plain_cycle(admin: Client, task_id: str, *, answerer: Client | None = None) -> str:
    """A new session asks, a person answers (on `answerer`, or the same server), the agent gets it
    once: the server works as before. The bundle's id."""
    session = await new_session(admin, task_id)
    async with admin.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 120}) as sub:
        agent = Stream(sub).start()
        pending = await asked(agent)
        result, _ = await respond(answerer or admin, pending)
        assert result["__typename"] == "ClarificationResponded", result
        await answered_once(agent)
    return pending


async def answered_once(agent: Stream) -> None:
    await eventually(lambda: right_now(outcomes(agent)), what="the agent answered")
    assert outcomes(agent) == ["ClarificationAnswered"]
    agent.stop()


async def retry_succeeds(admin: Client, server: Server, pending: str, agent: Stream, task_id: str) -> None:
    """After the outage: the person's retry succeeds, the agent gets it once, the row is answered,
    and a plain cycle works on the same server."""
    again = await retried_answer(admin, pending)
    assert again["__typename"] == "ClarificationResponded", again
    await answered_once(agent)
    assert await stored_statuses(server.database_url, pending) == ["answered"]
    await plain_cycle(admin, task_id)


async def right_now(value: Any) -> Any:
    return value


async def test_the_first_answer_after_a_postgresql_restart_succeeds(cluster: PgCluster) -> None:
    async with served(cluster) as (server, admin):
        task_id, session = await running_session(admin)
        async with admin.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 300}) as sub:
            agent = Stream(sub).start()
            pending = await asked(agent)
            await asyncio.to_thread(cluster.restart, "fast")

            result, _ = await respond(admin, pending)
            assert result["__typename"] == "ClarificationResponded", result
            await eventually(lambda: right_now(outcomes(agent)), what="the agent answered")
            assert outcomes(agent) == ["ClarificationAnswered"]
            agent.stop()
        assert await stored_statuses(server.database_url, pending) == ["answered"]
        await admin.execute(TASKS)  # a plain read
        await plain_cycle(admin, task_id)


async def test_while_postgresql_is_stopped_every_operation_fails_fast_typed_and_retryable(
    cluster: PgCluster,
) -> None:
    async with served(cluster) as (server, admin):
        task_id, session = await running_session(admin)
        async with (
            admin.subscribe(PROJECTIONS, {"t": task_id}) as projections,
            admin.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 300}) as sub,
        ):
            watch, agent = Stream(projections).start(), Stream(sub).start()
            pending = await asked(agent)
            _, fresh_token = await token_for(admin, "user", name="never used yet")
            await asyncio.to_thread(cluster.stop, "fast")
            try:
                await answer_and_read_fail_fast(admin, pending)

                # A token never seen before cannot be looked up: the request is refused the same way.
                stranger = Client(server.base_url, fresh_token)
                try:
                    refused_http = await stranger.raw(TASKS)
                finally:
                    await stranger.aclose()
                assert refused_http.status_code == 503
                assert refused_http.json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
                # An agent asking meanwhile is told the same, and may ask again.
                with pytest.raises(GraphQLError) as unavailable:
                    await new_session(admin, task_id)
                assert unavailable.value.codes == ["UNAVAILABLE"], unavailable.value.errors
                async with admin.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 300}) as asking:
                    with pytest.raises(GraphQLError) as refused:
                        await asking.next(timeout=OUTAGE_BOUND)
                assert refused.value.codes == ["UNAVAILABLE"], refused.value.errors

                assert await ready(server) == 503
                assert await metric(server, "turnwise_db_up") == 0
                assert await metric(server, "turnwise_db_connection_failures_total") >= 1
                assert outcomes(agent) == []  # the agent still waits
            finally:
                await asyncio.to_thread(cluster.start)

            await eventually(lambda: comes_to(ready(server), 200), within=30, what="ready again")
            assert await metric(server, "turnwise_db_up") == 1
            result, _ = await respond(admin, pending)
            assert result["__typename"] == "ClarificationResponded", result
            await eventually(lambda: right_now(outcomes(agent)), what="the agent answered")
            assert outcomes(agent) == ["ClarificationAnswered"]
            # The subscription stayed open through it all and shows what a fresh read says.
            await eventually(
                lambda: converged(admin, task_id, watch), within=30, what="the subscriber converged"
            )
            agent.stop()
            watch.stop()
        assert await stored_statuses(server.database_url, pending) == ["answered"]
        await plain_cycle(admin, task_id)


async def comes_to(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_a_crash_under_load_leaves_every_answer_delivered_once_or_retryable(cluster: PgCluster) -> None:
    """Ten people answer ten waiting agents while PostgreSQL is killed (`-m immediate`)."""
    async with served(cluster) as (server, admin):
        task_id, first = await running_session(admin)
        sessions = [first, *[await new_session(admin, task_id) for _ in range(9)]]
        async with contextlib.AsyncExitStack() as stack:
            agents = []
            for session in sessions:
                sub = await stack.enter_async_context(
                    admin.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 300})
                )
                agents.append(Stream(sub).start())
            pendings = [await asked(agent) for agent in agents]

            async def kill_soon() -> None:
                await asyncio.sleep(0.02)
                await asyncio.to_thread(cluster.kill)

            answers = asyncio.gather(*(respond(admin, p) for p in pendings))
            await kill_soon()
            results = await answers
            for result, took in results:
                assert result["__typename"] in ("ClarificationResponded", "ClarificationDeliveryFailed"), (
                    result
                )
                if result["__typename"] == "ClarificationDeliveryFailed":
                    assert result["retryable"] is True, result
                assert took < OUTAGE_BOUND + 5, took  # a connect, a statement, a restore: each bounded
            await asyncio.to_thread(cluster.start)
            await eventually(lambda: comes_to(ready(server), 200), within=30, what="ready again")

            # Every failed answer's retry succeeds (its claim, if any, was restored meanwhile).
            for (result, _), pending in zip(results, pendings, strict=True):
                if result["__typename"] == "ClarificationDeliveryFailed":
                    again = await retried_answer(admin, pending)
                    assert again["__typename"] == "ClarificationResponded", again
            for agent in agents:
                await eventually(lambda a=agent: right_now(outcomes(a)), what="every agent answered")  # type: ignore[misc]
            await asyncio.sleep(0.5)  # nothing more arrives: delivered once
            assert [outcomes(a) for a in agents] == [["ClarificationAnswered"]] * len(agents)
            for agent in agents:
                agent.stop()
        for pending in pendings:
            assert await stored_statuses(server.database_url, pending) == ["answered"]
        await plain_cycle(admin, task_id)


async def retried_answer(admin: Client, pending_id: str) -> dict[str, Any]:
    """Retry an answer as a person would: again while it says so (the claim coming back first)."""
    deadline = time.monotonic() + 30
    while True:
        result, _ = await respond(admin, pending_id)
        retry = result["__typename"] == "ClarificationDeliveryFailed" and result["retryable"]
        claimed = result.get("reason") == "DELIVERY_CLAIMED"
        if not (retry or claimed) or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.5)


async def test_a_frozen_postgresql_fails_operations_within_the_bound_and_they_succeed_after(
    cluster: PgCluster,
) -> None:
    """A partition that closes no connection: every process of the cluster SIGSTOPped."""
    async with served(cluster) as (server, admin):
        task_id, session = await running_session(admin)
        async with admin.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 300}) as sub:
            agent = Stream(sub).start()
            pending = await asked(agent)
            cluster.pause()
            try:
                await answer_and_read_fail_fast(admin, pending)
                assert await ready(server) == 503
            finally:
                cluster.resume()
            await eventually(lambda: comes_to(ready(server), 200), within=30, what="ready again")
            await retry_succeeds(admin, server, pending, agent, task_id)


async def claim_of(url: str, pending_id: str) -> str | None:
    """The delivery claim a bundle's row carries while its intent is open, read on the cluster."""
    db = Database(url)
    try:
        found = await rows(db, pending_id)
    finally:
        await db.dispose()
    return next((str(r[CLAIM_KEY]) for r in found if r.get(INTENT_KEY)), None)


async def test_a_claim_left_claimed_by_an_outage_is_restored_once_the_database_is_back(
    cluster: PgCluster,
) -> None:
    """The database stops between the claim and its confirmation: the waiter cannot confirm and the
    responder cannot restore. The running server restores the claim once PostgreSQL is back, still
    attached to the agent, which waited through it all and gets the person's retried answer once."""
    env = {"TURNWISE_FAULT_POINTS": "delay:after_claim", "TURNWISE_FAULT_DELAY_SECONDS": "4"}
    async with served(cluster, env) as (server, admin):
        task_id, session = await running_session(admin)
        async with admin.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 300}) as sub:
            agent = Stream(sub).start()
            pending = await asked(agent)
            answering = asyncio.ensure_future(respond(admin, pending))
            claim = await eventually(
                lambda: claim_of(server.database_url, pending), what="the claim committed"
            )
            await asyncio.to_thread(cluster.stop, "fast")
            try:
                result, _ = await answering
                assert result["__typename"] == "ClarificationDeliveryFailed", result
                assert result["retryable"] is True
                assert outcomes(agent) == []  # the agent still waits
            finally:
                await asyncio.to_thread(cluster.start)
            started = time.monotonic()
            await eventually(
                lambda: comes_to(claim_of(server.database_url, pending), None),
                within=15,
                what="the claim restored",
            )
            restored_after = time.monotonic() - started
            assert restored_after < 10, restored_after  # the restorer's bound: about a second once it answers
            assert claim in server.log()  # the restorer's own log line names the claim
            assert await stored_statuses(server.database_url, pending) == ["pending"]

            await retry_succeeds(admin, server, pending, agent, task_id)
