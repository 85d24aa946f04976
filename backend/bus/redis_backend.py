"""broadcaster's Redis backend with two repairs.

- Subscribing marks the backend ready only once redis-py recorded the channel: broadcaster sets its
  ready flag first, so its listener can start `listen()` while redis-py still counts no channel,
  return at once, and then wait for the next subscribe, deaf to the channels it has.
- Publishes share a bounded pool that waits for a free connection: redis-py's default pool raises
  "Too many connections" beyond 100 concurrent commands, which a burst of publishes reaches and
  which would look like a lost bus (the bus's publish timeout bounds the wait instead).
- Closing is bounded: a paused Redis answers nothing, so closing a dropped connection must never
  wait on it (the event bus replaces the connection instead).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from broadcaster._backends.redis import RedisBackend
from redis import asyncio as redis

POOL_CONNECTIONS = 32


class RedisBus(RedisBackend):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        pool = redis.BlockingConnectionPool.from_url(url, max_connections=POOL_CONNECTIONS, timeout=None)
        self._conn = redis.Redis(connection_pool=pool)
        self._pubsub = self._conn.pubsub()
        # The connection publishes go through (see `publish_many`), taken from the pool on connect.
        self._kept: Any = None
        self._kept_busy = False

    async def connect(self) -> None:
        await super().connect()
        self._kept = await self._conn.connection_pool.get_connection()  # type: ignore[no-untyped-call]

    async def publish_many(self, messages: list[tuple[str, str]]) -> None:
        """Publishes in one round trip on one connection: sent together, then their replies read in
        order. The bus's one sender publishes through a connection it keeps (a pool checkout costs a
        health-check read per call); a concurrent caller borrows one from the pool. A connection
        left in an unknown state (an error, a timeout) is dropped, never used again."""
        pool = self._conn.connection_pool
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

    async def subscribe(self, channel: str) -> None:
        await self._pubsub.subscribe(channel)
        self._ready.set()

    async def disconnect(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
        kept, self._kept = self._kept, None
        if kept is not None:
            with contextlib.suppress(Exception):
                await kept.disconnect(nowait=True)
        for closing in (self._pubsub.aclose, self._conn.aclose):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await closing()
