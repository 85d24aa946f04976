"""The bus's ordered outgoing queue and its one sender, which publishes a batch at a time."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from backend.background import stop_tasks

log = logging.getLogger("turnwise.events")

# At most this many messages per batch the sender publishes (one pipelined round trip on Redis).
SEND_BATCH = 500

Send = Callable[[list[tuple[str, str]]], Awaitable[None]]


class BusUnavailable(ConnectionError):
    """The bus is not connected right now: nothing was sent, so nothing can have been delivered."""


@dataclass(eq=False)
class _Outgoing:
    """Messages queued for publication, with the future of a caller waiting for them (None: posted)."""

    messages: list[tuple[str, str]]
    done: asyncio.Future[None] | None
    what: str


class Outbox:
    """Encoded (channel at the broker, message) pairs in the order they were queued; `send` publishes
    one batch and raises when it failed."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queue: collections.deque[_Outgoing] = collections.deque()
        self._ready = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._unsent = 0
        self._drained = asyncio.Event()
        self._drained.set()

    def put(self, messages: list[tuple[str, str]], done: asyncio.Future[None] | None, what: str) -> None:
        self._queue.append(_Outgoing(messages, done, what))
        self._ready.set()
        self._unsent += len(messages)
        self._drained.clear()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_queued(), name="turnwise-bus-sender")

    async def drained(self) -> None:
        """Wait until everything queued so far went out (or failed)."""
        await self._drained.wait()

    async def stop(self, within: float) -> None:
        """What was queued before the stop still goes out, within the bound."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._drained.wait()
        await stop_tasks([self._sender], log, "bus task")
        self._sender = None

    async def _send_queued(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                batch: list[_Outgoing] = []
                size = 0
                while self._queue and size < SEND_BATCH:
                    item = self._queue.popleft()
                    batch.append(item)
                    size += len(item.messages)
                try:
                    await self._send([m for item in batch for m in item.messages])
                except Exception as exc:  # noqa: BLE001 - reported to each waiting caller, logged for posts
                    _failed(batch, exc)
                else:
                    for item in batch:
                        if item.done is not None and not item.done.done():
                            item.done.set_result(None)
                finally:
                    self._unsent -= size
                    if not self._unsent:
                        self._drained.set()


def _failed(batch: list[_Outgoing], exc: Exception) -> None:
    for item in batch:
        if item.done is not None:
            if not item.done.done():
                item.done.set_exception(exc)
        elif isinstance(exc, BusUnavailable):
            log.warning("events not published: bus unavailable", extra={"event": item.what})
        else:
            log.error("event publication failed: %r", exc, extra={"event": item.what})
