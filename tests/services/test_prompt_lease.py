"""The prompt channel's lease: a failed renewal is logged and retried, and the lease is released
when the holder leaves whatever became of its renewals."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from sqlalchemy import select

from backend.db.engine import Database
from backend.db.tables import agent_runners as R
from backend.services.prompt_channel import PromptChannel
from tests.resume.support import eventually, faulty
from tests.services.support import services_for
from tests.services.test_executors import _reserved_turn


async def _leases(db: Database, session_id: str) -> list[dt.datetime]:
    async with db.read() as conn:
        rows = await conn.execute(select(R.c.expires_at).where(R.c.session_id == session_id))
        return [r.expires_at for r in rows]


def _failures(caplog: pytest.LogCaptureFixture) -> int:
    return sum(r.getMessage() == "runner lease renewal failed" for r in caplog.records)


async def test_a_failed_renewal_is_logged_and_retried_and_the_lease_is_released_on_leaving(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    session_id, _ = await _reserved_turn(db)
    async with services_for(db) as services:
        channel = PromptChannel(services.deps, lease_seconds=1.5)
        async with channel.hold(session_id):
            (taken,) = await _leases(db, session_id)
            async with faulty("prompts.renew"):
                await eventually(lambda: _failures(caplog) >= 1)
            assert await _leases(db, session_id) == [taken]
            # The database answers again: the next renewal extends the same lease.
            for _ in range(250):  # a renewal comes every half second
                (expires,) = await _leases(db, session_id)
                if expires > taken:
                    break
                await asyncio.sleep(0.02)
            assert expires > taken
        assert await _leases(db, session_id) == []


async def test_the_lease_is_released_even_while_renewals_are_failing(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    session_id, _ = await _reserved_turn(db)
    async with services_for(db) as services:
        channel = PromptChannel(services.deps, lease_seconds=1.5)
        async with faulty("prompts.renew"), channel.hold(session_id):
            await eventually(lambda: _failures(caplog) >= 1)
    # Removed, not merely expired: the next runner need not wait the lease out.
    assert await _leases(db, session_id) == []
