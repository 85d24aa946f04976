"""`turnwise serve` stops when response-delivery intent reconciliation fails, the way S35 stops it for
a reservation: before anything subscribes to the bus, binds the port or reports ready, changing
nothing; and the next start retries, so the stranded answer does not stay unanswerable.

The failure is the one the intent step refuses by design: an intent on a row that is still pending
(corrupt data). Beside it sits a well-formed stranded claim that recovery would restore.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import update

from backend import faults
from backend.db.engine import Database
from backend.db.tables import task_session_messages as M
from backend.domain.lifecycle import Answer
from backend.repository import claims, locks
from tests.api.client import Client
from tests.lifecycle.support import all_metadata, new_session
from tests.resume.support import detached_question, resuming
from tests.resume.test_startup import SUBSCRIBE, run_to_exit
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

STATE = "query($p: ID!) { clarification(pendingId: $p) { state questions { status } } }"


@pytest.fixture(params=["sqlite", "postgresql"])
def server_db(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    url = fresh_database(request.param)
    yield url
    drop_database(url)


async def stranded_and_corrupt(url: str) -> tuple[str, str, str]:
    """(pending id of a stranded claim, pending id and row id of a pending row carrying an intent)."""
    db = Database(url)
    try:
        async with resuming(db) as (svc, _):
            _, good_session = await new_session(svc)
            good = await detached_question(svc, good_session)
            _, bad_session = await new_session(svc)
            bad = await detached_question(svc, bad_session)
            assert good.bundle is not None
            assert bad.bundle is not None
            async with db.write() as conn:
                await locks.lock_sessions(conn, [good_session, bad_session])
                # As a crash right after the claim leaves it: answered, its delivery intent set.
                claimed = await claims.claim(
                    conn,
                    session_id=good_session,
                    pending_id=good.pending_id,
                    message_ids=[r.id for r in good.bundle.rows],
                    answers={"q1": Answer("q1", ("q1_opt1",), None)},
                    rejected=False,
                    claim_id="claim-good",
                    detach_rows=True,
                )
                assert len(claimed) == 1
                bad_row = bad.bundle.rows[0].id
                await conn.execute(update(M).where(M.c.id == bad_row).values(delivery_pending=True))
            await good.close()
            await bad.close()
        return good.pending_id, bad.pending_id, bad_row
    finally:
        await db.dispose()


async def metadata(url: str) -> list[dict[str, object]]:
    db = Database(url)
    try:
        return await all_metadata(db)
    finally:
        await db.dispose()


async def repair(url: str, row_id: str) -> None:
    """What an operator does with the corrupt row: drop the intent the pending row should never have had."""
    db = Database(url)
    try:
        async with db.write() as conn:
            await conn.execute(update(M).where(M.c.id == row_id).values(delivery_pending=False))
    finally:
        await db.dispose()


async def test_a_failing_intent_reconciliation_stops_serve_before_it_subscribes_and_the_next_start_retries(
    server_db: str,
) -> None:
    good, bad, bad_row = await stranded_and_corrupt(server_db)
    before = await metadata(server_db)
    for attempt in (1, 2):  # every start fails the same way while the data stays as it is
        server = Server(server_db, env={"TURNWISE_FAULT_POINTS": SUBSCRIBE, "TURNWISE_LOG_LEVEL": "debug"})
        code, answered = run_to_exit(server)
        log = server.log()
        # Exited on its own, non-zero, and not at the subscription fault point: nothing subscribed.
        assert code not in (0, faults.CRASH_EXIT_CODE), (attempt, log)
        assert "startup failed, not serving" in log
        assert "startup step 'reservations and delivery intents' failed" in log
        assert f"delivery intent on pending rows {bad_row}" in log
        # The port never answered: no readiness, no request served, nothing started after recovery.
        assert answered == []
        assert "turnwise ready" not in log
        for later in ("startup: live hub", "startup: waiter hub", "startup: watchdogs"):
            assert later not in log
        # Fails closed: neither the corrupt row nor the well-formed stranded claim was touched.
        assert await metadata(server_db) == before
    # Once the row is repaired, the next start recovers: the stranded answer is answerable again.
    await repair(server_db, bad_row)
    server = Server(server_db).start()
    try:
        client = Client(server.base_url, ADMIN_TOKEN)
        try:
            for pending_id in (good, bad):
                bundle = (await client.execute(STATE, {"p": pending_id}))["clarification"]
                assert bundle == {"state": "ACTIVE_DETACHED", "questions": [{"status": "PENDING"}]}
        finally:
            await client.aclose()
    finally:
        server.stop()
