"""`turnwise serve --workers N`, the token cache across processes, and `/metrics`, over real servers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text

from backend.db.engine import Database
from backend.db.tables import task_session_messages as M
from tests.api.client import Client, GraphQLError
from tests.api.gql import CREATE_USER, GRANT, ISSUE, REVOKE, running_session
from tests.api.kinds import ASK_PERMISSION, BASH, RESPOND_PERMISSION
from tests.conftest import redis_url
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database, server_pair

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $t: Float) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds } }
    ... on ClarificationDetached { pendingId } } }"""
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!) {
  respondToClarification(pendingId: $p, answers: $a) {
    __typename ... on ClarificationConflict { reason } } }"""
TASK = "query($t: ID!) { task(id: $t) { id } }"
QUESTION = {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}]}
ANSWER = [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"]}]


def serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", "serve", *args],
        env={**os.environ, "TURNWISE_PORT": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- refusals -----------------------------------------------------------------------------------


def test_several_workers_on_sqlite_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "turnwise.db"
    done = serve({"TURNWISE_DATABASE_URL": f"sqlite+aiosqlite:///{path}"}, "--workers", "2")
    assert done.returncode == 2
    assert "--workers 2 needs PostgreSQL" in done.stderr
    assert not path.exists()


def test_several_workers_on_the_in_process_bus_are_refused(pg_url: str) -> None:
    done = serve({"TURNWISE_DATABASE_URL": pg_url, "TURNWISE_BROADCAST_URL": "memory://"}, "--workers", "3")
    assert done.returncode == 2
    assert "--workers 3 needs a shared bus" in done.stderr
    assert "redis://" in done.stderr


def test_zero_workers_are_refused(tmp_path: Path) -> None:
    done = serve(
        {"TURNWISE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", "TURNWISE_WORKERS": "0"}
    )
    assert done.returncode == 2
    assert "--workers must be at least 1" in done.stderr


def test_an_empty_connection_pool_is_refused(tmp_path: Path) -> None:
    done = serve(
        {"TURNWISE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", "TURNWISE_DB_POOL_SIZE": "0"}
    )
    assert done.returncode == 2
    assert "TURNWISE_DB_POOL_SIZE must be at least 1" in done.stderr


async def test_the_connection_pool_keeps_its_size_open(pg_url: str) -> None:
    # Up to its size, the pool keeps connections open between transactions: none is made anew per
    # transaction (a burst beyond the size borrows more and closes them again).
    db = Database(pg_url, pool_size=4)
    try:

        async def one() -> int:
            async with db.write() as conn:
                await asyncio.sleep(0.05)
                return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())

        first = set(await asyncio.gather(*(one() for _ in range(4))))
        again = set(await asyncio.gather(*(one() for _ in range(4))))
        assert len(first) == 4
        assert again == first
    finally:
        await db.dispose()


# --- two workers --------------------------------------------------------------------------------


@pytest.fixture
def two_workers(pg_url: str) -> Iterator[Server]:
    del pg_url  # the fixture only checks that PostgreSQL is there; the server gets its own database
    url = fresh_database("postgresql")
    server = Server(url, broadcast_url=redis_url(), env={"TURNWISE_WORKERS": "2"})
    try:
        yield server.start()
    finally:
        server.stop()
        drop_database(url)


async def waiter_instance(database_url: str, pending_id: str) -> str:
    db = Database(database_url)
    try:
        async with db.read() as conn:
            rows = (await conn.execute(select(M.c.metadata).where(M.c.pending_id == pending_id))).all()
    finally:
        await db.dispose()
    for (metadata,) in rows:
        md = metadata if isinstance(metadata, dict) else json.loads(metadata)
        return str(md["waiter_instance"])
    raise AssertionError(f"no row of {pending_id}")


async def pinned_connections(base_url: str) -> dict[str, httpx.AsyncClient]:
    """One keep-alive connection (one, reused, so always the same worker) to each of the two workers,
    by the instance their `/readyz` names."""
    pinned: dict[str, httpx.AsyncClient] = {}
    # The other worker may still be starting (its own startup sequence) on a loaded machine: the
    # ready one takes every connection until then, so keep trying for a while, not a fixed count.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    attempts = 0
    while loop.time() < deadline:
        attempts += 1
        if attempts > 1:
            await asyncio.sleep(0.05)
        http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )
        instance = (await http.get("/readyz")).json()["instance"]
        if instance in pinned:
            await http.aclose()
        else:
            pinned[instance] = http
        if len(pinned) == 2:
            return pinned
    for http in pinned.values():
        await http.aclose()
    raise AssertionError(f"{attempts} connections in 60 s reached only the workers {sorted(pinned)}")


async def test_two_workers_serve_a_full_cycle_across_workers(two_workers: Server) -> None:
    admin = Client(two_workers.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await running_session(admin)
        async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            asked = (await sub.next())["askClarification"]
            assert asked["__typename"] == "ClarificationAsked"
            pending_id = asked["bundle"]["pendingId"]
            agents_worker = await waiter_instance(two_workers.database_url, pending_id)
            pinned = await pinned_connections(two_workers.base_url)
            try:
                assert agents_worker in pinned  # the agent's WebSocket is held by one of the two
                (other,) = [i for i in pinned if i != agents_worker]
                http = pinned[other]
                variables = {"p": pending_id, "a": ANSWER}
                body = (await http.post("/graphql", json={"query": RESPOND, "variables": variables})).json()
                # Still the same connection, so the answer went through the other worker.
                assert (await http.get("/readyz")).json()["instance"] == other
            finally:
                for client in pinned.values():
                    await client.aclose()
            assert body["data"]["respondToClarification"]["__typename"] == "ClarificationResponded", body
            answered = (await sub.next())["askClarification"]
            assert answered == {
                "__typename": "ClarificationAnswered",
                "pendingId": pending_id,
                "answers": [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"]}],
            }
    finally:
        await admin.aclose()


async def test_two_workers_serve_a_permission_decided_on_the_other_worker(two_workers: Server) -> None:
    # A decision crosses workers as the answer does: handed to the agent's worker over the bus,
    # confirmed there, and the agent gets it as decided, edited input and all.
    admin = Client(two_workers.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await running_session(admin)
        async with admin.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": BASH}) as sub:
            asked = (await sub.next())["askPermission"]
            assert asked["__typename"] == "PermissionAsked", asked
            pending_id = asked["request"]["pendingId"]
            agents_worker = await waiter_instance(two_workers.database_url, pending_id)
            pinned = await pinned_connections(two_workers.base_url)
            try:
                assert agents_worker in pinned
                (other,) = [i for i in pinned if i != agents_worker]
                http = pinned[other]
                variables = {"p": pending_id, "b": "ALLOW"}
                body = (
                    await http.post("/graphql", json={"query": RESPOND_PERMISSION, "variables": variables})
                ).json()
                assert (await http.get("/readyz")).json()["instance"] == other
            finally:
                for client in pinned.values():
                    await client.aclose()
            responded = body["data"]["respondToPermission"]
            assert responded["__typename"] == "PermissionResponded", body
            assert responded["resumed"] is False  # delivered live, not resumed
            decided = (await sub.next())["askPermission"]
            assert decided == {
                "__typename": "PermissionDecided",
                "pendingId": pending_id,
                "decision": {"behavior": "ALLOW", "updatedInput": BASH, "message": None},
            }
    finally:
        await admin.aclose()


# --- the token cache ----------------------------------------------------------------------------


async def test_a_revoked_token_is_refused_by_the_process_that_revoked_it_at_once(server: Server) -> None:
    admin = Client(server.base_url, ADMIN_TOKEN)
    try:
        task_id, _ = await running_session(admin)
        user_id, token_id, token = await user_token(admin, "dana")
        await admin.execute(GRANT, {"u": user_id, "t": task_id})
        user = Client(server.base_url, token)
        try:
            assert (await user.execute(TASK, {"t": task_id}))["task"] == {"id": task_id}  # now cached
            assert (await admin.execute(REVOKE, {"id": token_id}))["revokeToken"] is True
            refused = await user.raw(TASK, {"t": task_id})
            assert refused.status_code == 401
            assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        finally:
            await user.aclose()
    finally:
        await admin.aclose()


async def user_token(admin: Client, name: str) -> tuple[str, str, str]:
    """(user id, token id, token) of a new user with the user role."""
    user_id = (await admin.execute(CREATE_USER, {"n": name, "r": "user"}))["createUser"]["id"]
    issued = (await admin.execute(ISSUE, {"u": user_id, "s": None}))["issueToken"]
    return user_id, issued["id"], issued["token"]


@pytest.fixture
def two_servers() -> Iterator[tuple[Server, Server]]:
    with server_pair("postgresql", broadcast_url=redis_url()) as pair:
        yield pair


async def eventually(check: Any, what: str, bound: float = 10.0) -> None:
    """Wait for `check()` to hold; far below the cache's 60 s age bound, so only the bus can make it."""
    deadline = time.monotonic() + bound
    while not await check():
        assert time.monotonic() < deadline, f"{what} not seen within {bound} s"
        await asyncio.sleep(0.05)


async def test_revocations_and_grants_reach_the_token_cache_of_every_process(
    two_servers: tuple[Server, Server],
) -> None:
    a, b = two_servers
    admin_a = Client(a.base_url, ADMIN_TOKEN)
    try:
        task_id, _ = await running_session(admin_a)
        other_task, _ = await running_session(admin_a, title="another task")
        user_id, token_id, token = await user_token(admin_a, "dana")
        await admin_a.execute(GRANT, {"u": user_id, "t": task_id})
        on_b = Client(b.base_url, token)
        try:
            # B caches the identity (grants included) ...
            assert (await on_b.execute(TASK, {"t": task_id}))["task"] == {"id": task_id}
            assert (await on_b.execute(TASK, {"t": other_task}))["task"] is None
            # ... a grant made on A reaches B's cache ...
            await admin_a.execute(GRANT, {"u": user_id, "t": other_task})

            async def granted() -> bool:
                return bool((await on_b.execute(TASK, {"t": other_task}))["task"] == {"id": other_task})

            await eventually(granted, "the grant on B")
            # ... and so does a revocation.
            assert (await admin_a.execute(REVOKE, {"id": token_id}))["revokeToken"] is True

            async def refused() -> bool:
                return (await on_b.raw(TASK, {"t": task_id})).status_code == 401

            await eventually(refused, "the revocation on B")
            with pytest.raises(GraphQLError) as info:
                await on_b.execute(TASK, {"t": task_id})
            assert info.value.codes == ["UNAUTHENTICATED"]
        finally:
            await on_b.aclose()
    finally:
        await admin_a.aclose()


# --- metrics ------------------------------------------------------------------------------------


QUESTIONS = 'kind="clarification"'


def sample(text: str, name: str, labels: str = "") -> float:
    """The value of the series `name{labels}` (labels in any order); 0 before the series exists."""
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', labels))
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match and match[1] == name and dict(re.findall(r'(\w+)="([^"]*)"', match[2] or "")) == wanted:
            return float(match[3])
    return 0.0


async def scrape(server: Server) -> str:
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


async def test_metrics_count_a_cycle_a_conflict_and_the_database_work(server: Server) -> None:
    admin = Client(server.base_url, ADMIN_TOKEN)
    try:
        _, session_id = await running_session(admin)
        before = await scrape(server)
        async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION]}) as sub:
            pending_id = (await sub.next())["askClarification"]["bundle"]["pendingId"]
            waiting = await scrape(server)
            waiters = sample(waiting, "turnwise_live_waiters", QUESTIONS)
            assert waiters == sample(before, "turnwise_live_waiters", QUESTIONS) + 1
            result = await admin.execute(RESPOND, {"p": pending_id, "a": ANSWER})
            assert result["respondToClarification"]["__typename"] == "ClarificationResponded"
            assert (await sub.next())["askClarification"]["__typename"] == "ClarificationAnswered"
        again = await admin.execute(RESPOND, {"p": pending_id, "a": ANSWER})
        assert again["respondToClarification"] == {
            "__typename": "ClarificationConflict",
            "reason": "TERMINAL",
        }
        async with admin.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.05}) as sub:
            await sub.next()
            assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
        after = await scrape(server)
    finally:
        await admin.aclose()

    def moved(name: str, labels: str = "") -> float:
        return sample(after, name, labels) - sample(before, name, labels)

    assert moved("turnwise_clarification_asks_total") == 2
    assert moved("turnwise_clarification_live_answers_total") == 1
    assert moved("turnwise_clarification_detaches_total") == 1
    assert moved("turnwise_clarification_conflicts_total", 'reason="terminal"') == 1
    assert moved("turnwise_live_waiters", QUESTIONS) == 0
    assert moved("turnwise_pending_action_asks_total", QUESTIONS) == 2
    assert moved("turnwise_pending_action_live_answers_total", QUESTIONS) == 1
    assert moved("turnwise_pending_action_detaches_total", QUESTIONS) == 1
    assert moved("turnwise_pending_action_conflicts_total", f'{QUESTIONS},reason="terminal"') == 1
    respond_ops = 'type="mutation",field="respondToClarification"'
    assert moved("turnwise_graphql_operation_seconds_count", respond_ops) == 2
    graphql_posts = 'route="/graphql",method="POST",status="2xx"'
    assert moved("turnwise_http_request_seconds_count", graphql_posts) == 2  # the two responds
    assert moved("turnwise_db_statements_total") > 0
    assert moved("turnwise_db_transactions_total", 'outcome="commit"') > 0
    assert "# TYPE turnwise_subscribers gauge" in after


async def test_metrics_of_two_workers_add_up(two_workers: Server) -> None:
    pinned = await pinned_connections(two_workers.base_url)
    me = 'type="query",field="me"'
    try:
        before = await scrape(two_workers)
        for n, http in enumerate(pinned.values(), start=1):
            for _ in range(n):  # 1 on one worker, 2 on the other
                assert (await http.post("/graphql", json={"query": "{ me { role } }"})).status_code == 200
        after = await scrape(two_workers)
    finally:
        for http in pinned.values():
            await http.aclose()
    count = "turnwise_graphql_operation_seconds_count"
    assert sample(after, count, me) - sample(before, count, me) == 3
