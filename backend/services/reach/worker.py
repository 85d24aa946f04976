"""The notification worker: one loop per process that claims due outbox rows and sends them."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

import httpx

from backend.background import stop_tasks
from backend.bus import BUS_GAP
from backend.db.engine import utcnow
from backend.db.health import is_outage
from backend.outbound import webpush
from backend.repository import reach as repo
from backend.services.context import Deps
from backend.services.reach.asking import WAKE_CHANNEL, due_of
from backend.services.reach.closing import CLOSE_SCAN, Closing
from backend.services.reach.delivery import Delivery
from backend.services.reach.reminders import Reminders

log = logging.getLogger("turnwise.reach")
BATCH = 50
PRUNE_EVERY = dt.timedelta(hours=1)


@dataclass
class Reach(Delivery, Closing, Reminders):
    """The reach service: its parts' state, and the worker that runs them."""

    deps: Deps
    keys: webpush.VapidKeys | None = None
    client: httpx.AsyncClient | None = None
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0  # messages this process delivered (tests and the bench read it)
    close_scan: int = CLOSE_SCAN
    _soonest: dt.datetime | None = None  # the earliest due time an ask (of any process) woke it for
    _close_after: str | None = None  # where the walk over shown actions goes on (None: the start)
    _prune_at: dt.datetime | None = None  # when finished rows are next deleted (None: now)
    _look: bool = False  # look at the outbox at once, whatever the wait

    # --- lifetime -------------------------------------------------------------------------------

    async def start(self, *, worker: bool = True) -> None:
        await self.load_keys()
        self.client = self._new_client()
        if worker:
            self._task = asyncio.create_task(self._run(), name="turnwise-reach")

    async def stop(self) -> None:
        await stop_tasks([self._task], log, "reach worker")
        self._task = None
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    # --- the worker -----------------------------------------------------------------------------

    def _on_wake(self, event: dict[str, Any]) -> None:
        due = due_of(event)
        if due is None:
            self.look_now()  # a bus gap (or a message this release cannot read)
        else:
            self.wake_at(due)

    async def _run(self) -> None:
        # Wake-ups from every process's asks (and this one's); what was published before the
        # subscription is found by the first pass below.
        listener = await self.deps.bus.follow(WAKE_CHANNEL, self._on_wake, after_gap={"type": BUS_GAP})
        try:
            loop = asyncio.get_running_loop()
            while True:
                self._look = False
                try:
                    delay = await self.run_once()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    delay = float(self.settings.notify_poll_seconds)
                    if self._soonest is not None and self._soonest <= utcnow():
                        self._soonest = None  # committed rows: the next pass's outlook finds them
                    if is_outage(exc):
                        log.warning("notification worker: database unavailable; retrying")
                    else:
                        log.exception(
                            "notification worker step failed", extra={"event": "reach.worker_failed"}
                        )
                until = loop.time() + delay
                while not self._look:
                    left = until - loop.time()
                    soonest = self._soonest
                    if soonest is not None:
                        left = min(left, (soonest - utcnow()).total_seconds())
                    if left <= 0:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), left)
                    self._wake.clear()
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    async def run_once(self) -> float:
        """One pass of the worker; the seconds until it should look again. Idle (nothing queued,
        nothing being sent, no delivered push awaiting its close) it looks again only after
        `notify_idle_seconds`, or when an ask wakes it (`wake_at`: this process's asks, and every
        other's through the bus); while delivered pushes await their close, every
        `notify_poll_seconds`."""
        now = utcnow()
        if self._soonest is not None and self._soonest <= now:
            # Rows committed before they woke the worker: this pass's outlook finds them. A wake-up
            # that arrives from here on counts for the next pass.
            self._soonest = None
        if self._prune_at is None or now >= self._prune_at:
            await self.prune(now)
        async with self.deps.db.read() as conn:
            seen = await repo.outlook(conn)
        if seen.stale_sends(now):
            async with self.deps.db.write() as conn:
                await repo.abandon_stale_sends(conn, now)
        if seen.next_due is not None and seen.next_due <= now:
            async with self.deps.db.write() as conn:
                claimed = await self._claim(conn, now, self.lease, BATCH)
            if claimed:
                await self._send_all(claimed)
                return 0.0  # more may be due: look again at once
        if seen.awaiting_close and await self._queue_closes():
            return 0.0  # the walk over shown actions goes on with its next page
        delay = float(
            self.settings.notify_poll_seconds if seen.awaiting_close else self.settings.notify_idle_seconds
        )
        later = utcnow()
        for at in (self._soonest, seen.next_due, seen.next_lease_end):
            if at is not None:
                delay = min(delay, max((at - later).total_seconds(), 0.0))
        return max(delay, 0.01)

    async def prune(self, now: dt.datetime) -> int:
        """Delete finished outbox rows older than `notify_keep_days`; done about once an hour."""
        self._prune_at = now + PRUNE_EVERY
        async with self.deps.db.write() as conn:
            pruned = await repo.prune(conn, now - dt.timedelta(days=self.settings.notify_keep_days))
        if pruned:
            log.info("notification outbox pruned", extra={"event": "reach.pruned", "rows": pruned})
        return pruned
