"""One connection of the bus to its broker: a `broadcaster.Broadcast` used through its public API.

memory:// is broadcaster's own backend. redis:// and postgres:// are ours (`redis_backend`,
`postgres`), written to broadcaster's public `BroadcastBackend` interface because the bus must hear
at once when their connection is lost; broadcaster's own would not say. A link is never repaired:
the bus drops a failed one and opens a new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broadcaster import Broadcast, BroadcastBackend, Event

log = logging.getLogger("turnwise.events")

# How long closing a dropped connection may take (a paused broker answers nothing).
CLOSE_SECONDS = 1.0


def scheme(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0]


def _backend_for(url: str, on_lost: Callable[[str], None]) -> BroadcastBackend | None:
    """Our backend for a shared broker; None where broadcaster's own serves (memory://)."""
    if scheme(url) in ("postgres", "postgresql"):
        from backend.bus.postgres import PostgresBus

        return PostgresBus(url, on_lost)
    if scheme(url) in ("redis", "rediss"):
        from backend.bus.redis_backend import RedisBus

        return RedisBus(url, on_lost)
    return None


class Link:
    """A Broadcast over a backend of `url`. `on_lost(link, why)` hears of a backend whose connection
    ended; every other failure is raised to the caller."""

    def __init__(self, url: str, on_lost: Callable[[Link, str], None]) -> None:
        self.backend = _backend_for(url, lambda why: on_lost(self, why))
        self.broadcast = Broadcast(url) if self.backend is None else Broadcast(backend=self.backend)
        # Ours publish a batch in one round trip.
        self._publish_many: Callable[[list[tuple[str, str]]], Awaitable[None]] | None = getattr(
            self.backend, "publish_many", None
        )
        self._connected = False

    async def connect(self) -> None:
        await self.broadcast.connect()
        self._connected = True

    async def close(self) -> None:
        """Best-effort, within a bound: the connection is gone either way."""
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                if self._connected:
                    await self.broadcast.disconnect()
                elif self.backend is not None:  # its connect failed half-way
                    await self.backend.disconnect()
        except Exception as exc:  # noqa: BLE001 - the connection is gone either way
            log.debug("dropped bus connection did not close cleanly: %r", exc)
        self._connected = False

    async def hold(self, channel: str, ready: asyncio.Event, deliver: Callable[[Link, Event], None]) -> None:
        """Subscribe to `channel` at the broker and hand each of its messages to `deliver` until
        cancelled (raises when the subscription fails)."""
        async with self.broadcast.subscribe(channel) as subscriber:
            ready.set()
            while True:
                deliver(self, await subscriber.get())

    async def publish(self, messages: list[tuple[str, str]]) -> None:
        if self._publish_many is not None:
            await self._publish_many(messages)
            return
        for channel, message in messages:
            await self.broadcast.publish(channel, message)
