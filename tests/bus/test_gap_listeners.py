"""What a process's own listeners do when its bus comes back from a gap, over a Redis of the test's
own that is stopped and started again: the token cache forgets every identity (revocations published
meanwhile were lost), and a live waiter re-reads its bundle (here: a cancellation made while the bus
was down, whose event never came, ends its wait)."""

from __future__ import annotations

import asyncio
from typing import Any

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.pending.core import trusted
from tests.bus.support import eventually, redis_process
from tests.lifecycle.support import FAST, Agent, new_session


async def _value(value: Any) -> Any:
    return value


async def test_after_a_gap_the_token_cache_is_cleared_and_waiters_reread_their_bundles(db: Database) -> None:
    with redis_process() as redis:
        bus = EventBus(redis.url, ping_seconds=0.3, silence_seconds=1.5, publish_seconds=1.0)
        await bus.connect()
        settings = Settings(
            database_url=db.url,
            max_wait_seconds=60.0,
            live_confirmation_seconds=FAST["live_confirmation_seconds"],
            persistence_seconds=FAST["persistence_seconds"],
            heartbeat_seconds=FAST["heartbeat_seconds"],
        )
        svc = Services.build(Deps(db=db, bus=bus, settings=settings))
        await svc.waiters.start()
        await svc.access.start()
        try:
            user = await svc.access.create_user("someone", "user")
            issued = await svc.access.issue_token(user.id, None)
            assert await svc.access.identity(issued.token) is not None
            assert len(svc.access.tokens) == 1
            _, session_id = await new_session(svc)
            agent = await Agent.ask(svc, session_id, timeout_seconds=60.0)
            agent.wait()

            await asyncio.to_thread(redis.stop)
            await eventually(lambda: _value(not bus.connected), what="bus lost")
            # Written while the bus is down: its event is lost, so only the gap can tell the waiter.
            assert await svc.pending.cancel(agent.pending_id, authorize=trusted) is True
            await asyncio.to_thread(redis.start)
            await eventually(lambda: _value(bus.connected and bus.reconnects >= 1), what="bus back")

            await eventually(lambda: _value(len(svc.access.tokens) == 0), what="token cache cleared")
            outcome = await agent.outcome(30)
            assert isinstance(outcome, lc.Closed)
            assert outcome.status == "cancelled"
            # The cache fills again from the database.
            assert await svc.access.identity(issued.token) is not None
            await agent.close()
        finally:
            await svc.access.stop()
            await svc.waiters.stop()
            await bus.disconnect()
