"""Session projections, revisions and task summaries over real servers (spec: API surface, failure
modes, persistence guarantees)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import select, update

from backend.db.engine import Database
from backend.db.tables import meta, task_status_summaries
from frontend_py.kit.store import Store
from tests.api.client import Client
from tests.api.gql import (
    CREATE_SESSION,
    POST,
    PROJECTIONS,
    SESSIONS,
    SET_STATE,
    START,
    TASKS,
    revision_key,
    running_session,
)
from tests.dialects import fresh_db, served
from tests.servers import ADMIN_TOKEN, Server, server_pair


async def write_db(url: str, statement: object) -> None:
    db = Database(url)
    try:
        async with db.write() as conn:
            await conn.execute(statement)  # type: ignore[call-overload]
    finally:
        await db.dispose()


async def session_row(admin: Client, task_id: str, session_id: str) -> dict[str, object]:
    rows = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]
    return next(r for r in rows if r["id"] == session_id)


@pytest.fixture
def fresh_url(dialect: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of its own, for tests that restart or break their server."""
    with fresh_db(dialect, request) as url:
        yield url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def two_servers(request: pytest.FixtureRequest) -> Iterator[tuple[Server, Server]]:
    """Two processes behind one database, as in a scaled deployment."""
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    with server_pair(request.param) as pair:
        yield pair


async def test_a_client_alternating_between_two_processes_never_sees_an_older_revision(
    two_servers: tuple[Server, Server],
) -> None:
    a, b = (Client(s.base_url, ADMIN_TOKEN) for s in two_servers)
    try:
        task_id, session_id = await running_session(a)
        seen: list[tuple[int, int]] = []
        for i in range(6):
            writer = (a, b)[i % 2]
            await writer.execute(POST, {"s": session_id, "c": f"m{i}", "k": "message"})
            row_a = await session_row(a, task_id, session_id)
            row_b = await session_row(b, task_id, session_id)
            # The same state has the same revision whichever process reads it.
            assert row_a == row_b
            seen.append(revision_key(row_a["pendingActionRevision"]))  # type: ignore[arg-type]
        assert seen == sorted(seen)
        assert len(set(seen)) == len(seen)
        # A projection change written through one process is newer on the other as well.
        await b.execute(POST, {"s": session_id, "c": "may I?", "k": "permission_request"})
        after = await session_row(a, task_id, session_id)
        assert after["pendingAction"] == "PERMISSION"
        assert revision_key(after["pendingActionRevision"]) > seen[-1]  # type: ignore[arg-type]
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_restarted_process_reports_a_newer_epoch_for_the_same_state(
    two_servers: tuple[Server, Server],
) -> None:
    first, second = two_servers
    admin = Client(first.base_url, ADMIN_TOKEN)
    try:
        task_id, session_id = await running_session(admin)
        before = await session_row(admin, task_id, session_id)
    finally:
        await admin.aclose()
    third = Server(first.database_url).start()
    try:
        for srv in (second, third):
            client = Client(srv.base_url, ADMIN_TOKEN)
            row = await session_row(client, task_id, session_id)
            await client.aclose()
            assert row["pendingAction"] == before["pendingAction"]
            assert revision_key(row["pendingActionRevision"]) > revision_key(before["pendingActionRevision"])  # type: ignore[arg-type]
    finally:
        third.stop()


@pytest.mark.scenario("S44")
async def test_corrupt_stored_epoch_is_an_error_not_a_reset(fresh_url: str) -> None:
    url = fresh_url
    srv = Server(url).start()
    try:
        admin = Client(srv.base_url, ADMIN_TOKEN)
        task_id, _ = await running_session(admin)
        await write_db(url, update(meta).where(meta.c.key == "pending_action_epoch").values(value="7x"))
        # A forced session list fails as a whole instead of answering with a false clean projection.
        response = await admin.raw(SESSIONS, {"task": task_id})
        body = response.json()
        assert body["data"] is None
        assert [e["extensions"]["code"] for e in body["errors"]] == ["CORRUPT_DATA"]
        await admin.aclose()
        srv.stop()
        restarted = Server(url)
        with pytest.raises(RuntimeError, match="server exited"):
            restarted.start()
        assert "not a decimal number" in restarted.log()
    finally:
        srv.stop()


@pytest.mark.scenario("S08")
async def test_stale_summary_is_repaired_on_the_task_list_with_unrelated_fields_kept(
    server: Server, admin: Client
) -> None:
    task_id, _ = await running_session(admin)
    first = next(t for t in (await admin.execute(TASKS))["tasks"] if t["id"] == task_id)["summary"]
    assert first["pendingAction"] is None
    await write_db(
        server.database_url,
        update(task_status_summaries)
        .where(task_status_summaries.c.task_id == task_id)
        .values(pending_action="clarification", fields={"workflow": "review"}),
    )
    repaired = next(t for t in (await admin.execute(TASKS))["tasks"] if t["id"] == task_id)["summary"]
    assert repaired["pendingAction"] is None
    assert repaired["revision"] == first["revision"] + 1
    db = Database(server.database_url)
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(task_status_summaries).where(task_status_summaries.c.task_id == task_id)
            )
        ).one()
    await db.dispose()
    assert row.fields == {"workflow": "review"}
    # A read with nothing to repair leaves the revision alone.
    again = next(t for t in (await admin.execute(TASKS))["tasks"] if t["id"] == task_id)["summary"]
    assert again["revision"] == repaired["revision"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def faulty_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The summary fault tests run on both dialects."""
    with served(
        request.param, request, env={"TURNWISE_FAULT_POINTS": "summary.cas_conflict,api.tasks"}
    ) as srv:
        yield srv


@pytest.fixture
async def faulty_admin(faulty_server: Server) -> AsyncIterator[Client]:
    async with contextlib.aclosing(Client(faulty_server.base_url, ADMIN_TOKEN)) as client:
        yield client


async def test_summary_repair_failure_returns_null_summary_for_that_task(faulty_admin: Client) -> None:
    task_id, session_id = await running_session(faulty_admin)
    await faulty_admin.execute(POST, {"s": session_id, "c": "may I?", "k": "permission_request"})
    body = await faulty_admin.execute(
        "query($id: ID!) { task(id: $id) { id summary { revision } sessions { pendingAction } } }",
        {"id": task_id},
    )
    # The repair lost every compare-and-set: no summary, so clients drop their cached one; the
    # authoritative sessions still say what is pending.
    assert body["task"]["summary"] is None
    assert body["task"]["sessions"] == [{"pendingAction": "PERMISSION"}]


async def test_unexpected_error_is_logged_with_an_id_and_returned_without_internals(
    faulty_server: Server, faulty_admin: Client
) -> None:
    response = await faulty_admin.raw("{ tasks { id } }")
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "INTERNAL"
    error_id = error["extensions"]["errorId"]
    assert error["message"] == f"Internal error (id {error_id})"
    assert "hunter2" not in response.text
    assert "Traceback" not in response.text
    await asyncio.sleep(0.2)
    log = faulty_server.log()
    assert error_id in log
    assert "hunter2" in log


@pytest.mark.scenario("S06")
async def test_list_response_and_subscription_projection_merge_to_the_newest_in_either_order(
    admin: Client,
) -> None:
    task_id, session_id = await running_session(admin)
    async with admin.subscribe(PROJECTIONS, {"s": session_id}) as sub:
        await sub.next()  # snapshot
        # The list request "in flight": its response was built before the newer event.
        in_flight = (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]
        await admin.execute(POST, {"s": session_id, "c": "may I?", "k": "permission_request"})
        event = (await sub.next())["pendingActionChanged"]
    assert revision_key(event["revision"]) > revision_key(in_flight[0]["pendingActionRevision"])
    for order in ("list first", "event first"):
        store = Store()
        if order == "list first":
            store.apply_task_sessions(task_id, in_flight)
            store.apply_projection(event)
        else:
            store.apply_projection(event)
            store.apply_task_sessions(task_id, in_flight)
        projection = store.projection(session_id)
        assert projection is not None
        assert projection["pendingAction"] == "PERMISSION", order


async def test_unseen_pre_restart_epoch_is_rejected_after_a_client_rebuild(fresh_url: str) -> None:
    url = fresh_url
    srv = Server(url).start()
    try:
        admin = Client(srv.base_url, ADMIN_TOKEN)
        task_a, _ = await running_session(admin, title="a")
        task_b, session_b = await running_session(admin, title="b")
        await admin.execute(POST, {"s": session_b, "c": "may I?", "k": "permission_request"})
        # A delayed pre-restart answer about session b, still in flight...
        stale = (await admin.execute(SESSIONS, {"task": task_b}))["taskSessions"]
        await admin.aclose()
        srv.stop()
        srv = Server(url).start()
        admin = Client(srv.base_url, ADMIN_TOKEN)
        # ...while the client rebuilt its state from post-restart reads of other sessions only.
        store = Store()
        store.apply_task_sessions(task_a, (await admin.execute(SESSIONS, {"task": task_a}))["taskSessions"])
        store.apply_task_sessions(task_b, stale)
        assert store.projection(session_b) is None
        fresh = (await admin.execute(SESSIONS, {"task": task_b}))["taskSessions"]
        assert int(fresh[0]["pendingActionRevision"]["epoch"]) > int(
            stale[0]["pendingActionRevision"]["epoch"]
        )
        store.apply_task_sessions(task_b, fresh)
        assert store.projection(session_b) is not None
        await admin.aclose()
    finally:
        srv.stop()


async def test_task_pending_action_counts_only_working_sessions(admin: Client) -> None:
    task_id, _ = await running_session(admin)
    created = (await admin.execute(CREATE_SESSION, {"task": task_id, "p": False}))["createSession"]["id"]
    await admin.execute(START, {"s": created})
    await admin.execute(POST, {"s": created, "c": "may I?", "k": "permission_request"})

    async def summary() -> object:
        tasks = (await admin.execute(TASKS))["tasks"]
        return next(t for t in tasks if t["id"] == task_id)["summary"]["pendingAction"]

    assert await summary() is None  # the session asking is only CREATED
    await admin.execute(SET_STATE, {"s": created, "st": "WAITING_FOR_INPUT"})
    assert await summary() == "PERMISSION"
    await admin.execute(SET_STATE, {"s": created, "st": "COMPLETED"})
    assert await summary() is None
