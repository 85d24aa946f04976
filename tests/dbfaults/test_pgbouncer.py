"""Two `turnwise serve` processes through PgBouncer in transaction pooling mode.

PgBouncer hands each transaction whatever server connection is free, so nothing may outlive a
transaction on a connection: no named prepared statements, no session-level locks or settings.
With `TURNWISE_DB_POOLER=pgbouncer` the service keeps to that; migrations go to the cluster directly
(`TURNWISE_MIGRATE_DATABASE_URL`), and the bus is Redis (LISTEN/NOTIFY needs a direct connection).
Live, detached, concurrent and stale cycles then run across both processes with no error, and a
PostgreSQL restart behind PgBouncer is as invisible as without it. Without the setting, the
service refuses to start, naming it, instead of failing every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.api.client import Client
from tests.api.gql import START, TASKS, running_session
from tests.bus.support import eventually
from tests.bus.test_bus_faults import ASK, QUESTION, Stream, asked, new_session, outcomes
from tests.conftest import redis_url
from tests.dbfaults.support import PgBouncer, PgCluster, pg_cluster
from tests.dbfaults.test_database_faults import (
    plain_cycle,
    respond,
    retried_answer,
    right_now,
    stored_statuses,
)
from tests.servers import ADMIN_TOKEN, Server

ENV = {"TURNWISE_HEARTBEAT_SECONDS": "1", "TURNWISE_DB_POOL_SIZE": "4", "TURNWISE_DB_POOLER": "pgbouncer"}


@pytest.fixture(scope="module")
def bounced() -> Iterator[tuple[PgCluster, PgBouncer]]:
    with pg_cluster() as cluster:
        # Fewer server connections than the two processes' pools: transactions share them.
        bouncer = PgBouncer(cluster, pool_size=5).start()
        try:
            yield cluster, bouncer
        finally:
            bouncer.stop()


@contextlib.asynccontextmanager
async def pair(cluster: PgCluster, bouncer: PgBouncer) -> AsyncIterator[tuple[Client, Client, str]]:
    name = f"turnwise_{uuid.uuid4().hex[:10]}"
    direct = await asyncio.to_thread(cluster.createdb, name)
    env = {**ENV, "TURNWISE_MIGRATE_DATABASE_URL": direct}
    bus = redis_url()
    a = Server(bouncer.database_url(name), broadcast_url=bus, env=env)
    b = Server(bouncer.database_url(name), broadcast_url=bus, env=env)
    await asyncio.to_thread(a.start)
    await asyncio.to_thread(b.start)
    on_a, on_b = Client(a.base_url, ADMIN_TOKEN), Client(b.base_url, ADMIN_TOKEN)
    try:
        yield on_a, on_b, direct
    finally:
        await on_a.aclose()
        await on_b.aclose()
        await asyncio.to_thread(a.stop)
        await asyncio.to_thread(b.stop)
        for server in (a, b):
            assert "prepared statement" not in server.log(), server.log()


async def test_two_processes_behind_pgbouncer_run_live_detached_concurrent_and_stale_cycles(
    bounced: tuple[PgCluster, PgBouncer],
) -> None:
    cluster, bouncer = bounced
    async with pair(cluster, bouncer) as (on_a, on_b, direct):
        task_id, session = await running_session(on_a)

        # Live: the agent waits on A, the person answers on B.
        pending = await plain_cycle(on_a, task_id, answerer=on_b)
        assert await stored_statuses(direct, pending) == ["answered"]

        # Detached: the agent's wait runs out; the answer goes to its inbox, once.
        async with on_b.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 0.3}) as sub:
            detached = (await sub.next())["askClarification"]["bundle"]["pendingId"]
            assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
        result, _ = await respond(on_a, detached)
        assert result["__typename"] == "ClarificationResponded", result
        again, _ = await respond(on_b, detached)
        assert again["__typename"] == "ClarificationConflict", again

        # Stale: a newer turn makes a detached question inert history.
        async with on_a.subscribe(ASK, {"s": session, "q": [QUESTION], "t": 0.3}) as sub:
            older = (await sub.next())["askClarification"]["bundle"]["pendingId"]
            assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
        await on_b.execute(START, {"s": session})
        late, _ = await respond(on_b, older)
        assert late == {"__typename": "ClarificationConflict", "reason": "SUPERSEDED"}, late

        # Concurrent: ten agents on both processes, answered at once from the other one.
        sessions = [await new_session(on_a, task_id) for _ in range(10)]
        async with contextlib.AsyncExitStack() as stack:
            agents = []
            for i, s in enumerate(sessions):
                client = on_a if i % 2 else on_b
                sub = await stack.enter_async_context(
                    client.subscribe(ASK, {"s": s, "q": [QUESTION], "t": 300})
                )
                agents.append(Stream(sub).start())
            pendings = [await asked(agent) for agent in agents]
            results = await asyncio.gather(
                *(respond(on_b if i % 2 else on_a, p) for i, p in enumerate(pendings))
            )
            assert [r["__typename"] for r, _ in results] == ["ClarificationResponded"] * 10, results
            for agent in agents:
                await eventually(lambda a=agent: right_now(outcomes(a)), what="every agent answered")  # type: ignore[misc]
            assert [outcomes(a) for a in agents] == [["ClarificationAnswered"]] * 10
            for agent in agents:
                agent.stop()

        # PostgreSQL restarts behind PgBouncer. PgBouncer itself refuses clients for
        # `server_login_retry` after a login failed during the restart: an answer then fails
        # retryable, and the person's retry succeeds; the waiting agent gets it once.
        s = await new_session(on_a, task_id)
        async with on_a.subscribe(ASK, {"s": s, "q": [QUESTION], "t": 300}) as sub:
            agent = Stream(sub).start()
            pending = await asked(agent)
            await asyncio.to_thread(cluster.restart, "fast")
            result = await retried_answer(on_b, pending)
            assert result["__typename"] == "ClarificationResponded", result
            await eventually(lambda: right_now(outcomes(agent)), what="the agent answered")
            agent.stop()
        await on_a.execute(TASKS)
        await on_b.execute(TASKS)


@pytest.mark.parametrize("migrations", ["direct", "through PgBouncer"])
async def test_serve_behind_pgbouncer_without_the_pooler_setting_refuses_to_start_naming_it(
    bounced: tuple[PgCluster, PgBouncer], migrations: str
) -> None:
    cluster, bouncer = bounced
    name = f"turnwise_{uuid.uuid4().hex[:10]}"
    direct = await asyncio.to_thread(cluster.createdb, name)
    # All the README asks for behind PgBouncer but the one line.
    env = {**ENV, "TURNWISE_DB_POOLER": ""}
    if migrations == "direct":
        env["TURNWISE_MIGRATE_DATABASE_URL"] = direct
    server = Server(bouncer.database_url(name), broadcast_url=redis_url(), env=env)
    try:
        with pytest.raises(RuntimeError, match=r"server exited with [1-9]"):
            await asyncio.to_thread(server.start)
    finally:
        await asyncio.to_thread(server.stop)
    refusal = [line for line in server.log().splitlines() if "startup failed, not serving:" in line]
    assert len(refusal) == 1, server.log()
    assert "not serving: TURNWISE_DB_POOLER is unset" in refusal[0], server.log()
    assert "set TURNWISE_DB_POOLER=pgbouncer" in refusal[0], server.log()
    # The message says it all: no traceback above it, uvicorn's copy of one included.
    assert "Traceback" not in server.log(), server.log()
