"""`turnwise serve` recovers before it serves: an unreconcilable reservation stops the process
before anything subscribes to the bus, binds the port or reports ready."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import delete

from backend import faults
from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import task_status_summaries
from backend.repository import reservations, summaries
from backend.services import startup
from backend.services.container import Services
from backend.services.context import Deps
from tests.lifecycle.support import new_session, rows
from tests.resume.support import resuming, turn_rows
from tests.resume.test_recovery import strand
from tests.servers import Server, drop_database, fresh_database

# Reached by the first bus subscription of any kind: ending the process there proves one happened.
SUBSCRIBE = "bus.subscribe"


@pytest.fixture(params=["sqlite", "postgresql"])
def server_db(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    url = fresh_database(request.param)
    yield url
    drop_database(url)


def run_to_exit(server: Server, timeout: float = 60.0) -> tuple[int, list[int]]:
    """Start the process and probe its port until it exits: (exit code, statuses it answered)."""
    server.start(wait=False)
    assert server.proc is not None
    answered: list[int] = []
    deadline = time.monotonic() + timeout
    while server.proc.poll() is None:
        assert time.monotonic() < deadline, server.log()
        with contextlib.suppress(httpx.TransportError):  # nothing listens on the port
            answered.append(httpx.get(f"{server.base_url}/readyz", timeout=1).status_code)
        time.sleep(0.02)
    return server.proc.returncode, answered


async def unreconcilable(url: str) -> tuple[str, str, str]:
    """A stranded reservation whose claimed-message ids are malformed: (session, pending id, turn)."""
    db = Database(url)
    try:
        async with resuming(db) as (svc, _):
            _, session_id = await new_session(svc)
            pending_id, turn_id, _ = await strand(
                svc, db, session_id, metadata={reservations.SOURCE_MESSAGE_IDS: [1]}
            )
        return session_id, pending_id, turn_id
    finally:
        await db.dispose()


async def stored(
    url: str, session_id: str, pending_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    db = Database(url)
    try:
        return await turn_rows(db, session_id), await rows(db, pending_id)
    finally:
        await db.dispose()


@pytest.mark.scenario("S35")
async def test_an_unreconcilable_reservation_stops_serve_before_it_subscribes_or_serves(
    server_db: str,
) -> None:
    session_id, pending_id, turn_id = await unreconcilable(server_db)
    before = await stored(server_db, session_id, pending_id)
    server = Server(server_db, env={"TURNWISE_FAULT_POINTS": SUBSCRIBE, "TURNWISE_LOG_LEVEL": "debug"})
    code, answered = run_to_exit(server)
    log = server.log()
    # Exited on its own, non-zero, and not at the subscription fault point: nothing subscribed.
    assert code not in (0, faults.CRASH_EXIT_CODE), log
    assert "startup failed, not serving" in log
    assert f"reservation {turn_id}" in log
    assert reservations.SOURCE_MESSAGE_IDS in log
    # The port never answered, so neither readiness nor any request was served.
    assert answered == []
    assert "turnwise ready" not in log
    for later in ("startup: live hub", "startup: waiter hub", "startup: watchdogs"):
        assert later not in log
    # Fails closed: the reservation and its claimed rows are kept exactly as they were.
    assert await stored(server_db, session_id, pending_id) == before


def test_a_clean_database_subscribes_during_startup_so_the_probe_can_see_it(server_db: str) -> None:
    server = Server(server_db, env={"TURNWISE_FAULT_POINTS": SUBSCRIBE, "TURNWISE_LOG_LEVEL": "debug"})
    code, answered = run_to_exit(server)
    assert code == faults.CRASH_EXIT_CODE, server.log()
    assert "startup: live hub" in server.log()
    assert answered == []


async def test_startup_refreshes_the_summaries_recovery_changed_before_anything_listens(db: Database) -> None:
    async with resuming(db) as (svc, _):
        task_id, session_id = await new_session(svc)
        pending_id, _, _ = await strand(svc, db, session_id)
    # As a crash after the claim can leave it: no summary says a question is pending.
    async with db.write() as conn:
        await conn.execute(delete(task_status_summaries).where(task_status_summaries.c.task_id == task_id))
    bus = EventBus("memory://")
    await bus.connect()
    services = Services.build(Deps(db=db, bus=bus, settings=Settings(database_url=db.url)))
    try:
        await startup.start(services)
        # Recovery restored the claimed row; its events went out before the projector listened, so
        # only the startup step itself can have written this summary.
        assert [r["status"] for r in await rows(db, pending_id)] == ["pending"]
        async with db.read() as conn:
            summary = (await summaries.read_summaries(conn, [task_id]))[task_id]
        assert summary.pending_action == "clarification"
    finally:
        await startup.stop(services)
        await bus.disconnect()
