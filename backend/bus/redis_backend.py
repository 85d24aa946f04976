"""Redis pub/sub as a broadcaster backend (broadcaster's public `BroadcastBackend` interface), ours.

broadcaster's own Redis backend cannot serve a bus that must notice a lost broker and resubscribe:
its reader task dies silently with its connection, it marks itself ready before redis-py recorded
the channel (so its reader can return at once and stay deaf to the channels it has), its default
pool raises "Too many connections" beyond 100 concurrent publishes (which would look like a lost
bus), and closing waits on a broker that may be paused. This one:

- reads on one pub/sub connection, which never reconnects by itself (a silent reconnect would hide
  the messages missed meanwhile), and reports its loss through `on_lost` at once;
- starts reading only once redis-py recorded a channel;
- publishes through a bounded pool that waits for a free connection (the bus's publish timeout
  bounds the wait), and a batch in one round trip (`publish_many`);
- closes within a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from broadcaster import BroadcastBackend, Event
from redis import asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

log = logging.getLogger("turnwise.events")

POOL_CONNECTIONS = 32
# How long closing a connection or unsubscribing may take (a paused Redis answers nothing).
CLOSE_SECONDS = 1.0


class RedisBus(BroadcastBackend):
    def __init__(self, url: str, on_lost: Callable[[str], None] | None = None) -> None:
        pool = redis.BlockingConnectionPool.from_url(
            url, max_connections=POOL_CONNECTIONS, timeout=None, retry=Retry(NoBackoff(), 0)
        )
        self._client = redis.Redis(connection_pool=pool)
        self._pubsub = self._client.pubsub()
        self._on_lost = on_lost
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._subscribed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._lost: str | None = None
        # The connection publishes go through (see `publish_many`), taken from the pool on connect.
        self._kept: Any = None
        self._kept_busy = False

    async def connect(self) -> None:
        await self._pubsub.connect()  # type: ignore[no-untyped-call]
        self._kept = await self._client.connection_pool.get_connection()  # type: ignore[no-untyped-call]
        self._reader = asyncio.create_task(self._read(), name="turnwise-bus-redis-reader")

    async def _read(self) -> None:
        try:
            while True:
                # redis-py's listen() ends at once while it records no channel.
                await self._subscribed.wait()
                async for message in self._pubsub.listen():
                    if message["type"] == "message":
                        channel, data = message["channel"].decode(), message["data"].decode()
                        self._queue.put_nowait(Event(channel=channel, message=data))
                self._subscribed.clear()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the bus, which replaces this backend
            self._lost = f"redis pub/sub connection lost: {exc!r}"
            if self._on_lost is not None:
                self._on_lost(self._lost)
            else:
                log.warning("redis bus reader stopped: %s", self._lost)

    async def disconnect(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        kept, self._kept = self._kept, None
        if kept is not None:
            with contextlib.suppress(Exception):
                await kept.disconnect(nowait=True)
        for closing in (self._pubsub.aclose, self._client.aclose):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await closing()

    async def subscribe(self, channel: str) -> None:
        await self._pubsub.subscribe(channel)
        self._subscribed.set()

    async def unsubscribe(self, channel: str) -> None:
        if self._lost is not None:
            return  # nothing is subscribed on a lost connection
        # Runs while its subscriber is being cancelled, so it must never wait on a paused Redis.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_SECONDS):
                await self._pubsub.unsubscribe(channel)

    async def publish(self, channel: str, message: Any) -> None:
        await self._client.publish(channel, message)

    async def publish_many(self, messages: list[tuple[str, str]]) -> None:
        """Publishes in one round trip on one connection: sent together, then their replies read in
        order. The bus's one sender publishes through a connection it keeps (a pool checkout costs a
        health-check read per call); a concurrent caller borrows one from the pool. A connection
        left in an unknown state (an error, a timeout) is dropped, never used again."""
        pool = self._client.connection_pool
        kept = self._kept is not None and not self._kept_busy
        if kept:
            conn = self._kept
            self._kept_busy = True
        else:
            conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await conn.send_packed_command(conn.pack_commands([("PUBLISH", c, m) for c, m in messages]))
            for _ in messages:
                await conn.read_response()
        except BaseException:
            await conn.disconnect(nowait=True)
            if kept:
                self._kept = None
            raise
        finally:
            if kept:
                self._kept_busy = False
            else:
                await pool.release(conn)

    async def next_published(self) -> Event:
        return await self._queue.get()
