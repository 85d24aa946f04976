"""The event bus (broadcaster: memory:// in one process, redis:// or postgres:// across several).

Events carry ids and revisions, never pending truth: a receiver re-reads the repository.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from broadcaster import Broadcast

from backend import faults

log = logging.getLogger("turnwise.events")

SESSION_CHANNEL = "turnwise.session"
TASK_CHANNEL = "turnwise.task"


def session_channel(session_id: str) -> str:
    return f"{SESSION_CHANNEL}.{session_id}"


class MissingBusBackend(RuntimeError):
    """The bus URL names a backend whose client package is not installed."""


def _require_backend(url: str) -> None:
    if url.split(":", 1)[0] in ("redis", "rediss"):
        try:
            import redis.asyncio  # noqa: F401
        except ImportError as exc:
            raise MissingBusBackend(
                f"TURNWISE_BROADCAST_URL is {url.split(':', 1)[0]}:// but the redis package is not "
                "installed: pip install 'turnwise[redis]'"
            ) from exc


class EventBus:
    def __init__(self, url: str) -> None:
        _require_backend(url)
        self.url = url
        self._broadcast = Broadcast(url)
        self.published = 0

    async def connect(self) -> None:
        await self._broadcast.connect()

    async def disconnect(self) -> None:
        await self._broadcast.disconnect()

    async def publish(self, channel: str, event: dict[str, Any]) -> None:
        await self._broadcast.publish(channel=channel, message=json.dumps(event, separators=(",", ":")))
        self.published += 1

    @asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        await faults.hit("bus.subscribe")  # lets a test prove that nothing subscribed
        async with self._broadcast.subscribe(channel=channel) as subscriber:

            async def events() -> AsyncIterator[dict[str, Any]]:
                stream: AsyncIterator[Any] = subscriber  # type: ignore[assignment]
                async for raw in stream:
                    if raw is None:
                        return
                    yield json.loads(raw.message)

            yield events()
