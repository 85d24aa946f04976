"""PostgreSQL LISTEN/NOTIFY as a broadcaster backend, for a deployment on PostgreSQL alone.

broadcaster's own PostgresBackend publishes and listens on one asyncpg connection, so two concurrent
publishes (or a publish during LISTEN) fail with "another operation is in progress", and NOTIFY
refuses payloads of 8000 bytes or more. This backend listens on one connection and publishes on
another, each used by one operation at a time (a lock), and splits a large message into numbered
chunks sent in one transaction (delivered together and in order), reassembled by the receiver.
Channel names longer than a PostgreSQL identifier (63 bytes) are replaced by a stable hash. The
connections carry `application_name` `turnwise-bus-listen` / `turnwise-bus-publish`. A listening
connection that ends (terminated, the server gone) is reported through `on_lost` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from broadcaster import BroadcastBackend, Event

from backend.bus.names import bus_channel_name
from backend.domain.ids import new_id

# NOTIFY payloads must stay under 8000 bytes; a chunk carries at most CHUNK characters (4 bytes
# each at worst in UTF-8) plus its header.
WHOLE_LIMIT = 7900
CHUNK = 1900
PARTIAL_SECONDS = 60.0
APPLICATION = "turnwise-bus"

log = logging.getLogger("turnwise.events")


def asyncpg_url(url: str) -> str:
    scheme, rest = url.split(":", 1)
    return ("postgresql" if scheme.split("+", 1)[0] in ("postgres", "postgresql") else scheme) + ":" + rest


def encode(message: str) -> list[str]:
    """One payload `=<message>`, or chunks `#<id>:<i>:<n>:<piece>` of a large message."""
    if len(message.encode()) <= WHOLE_LIMIT:
        return ["=" + message]
    pieces = [message[i : i + CHUNK] for i in range(0, len(message), CHUNK)]
    ident = new_id()
    return [f"#{ident}:{i}:{len(pieces)}:{p}" for i, p in enumerate(pieces)]


@dataclass
class _Partial:
    total: int
    started: float = field(default_factory=time.monotonic)
    pieces: dict[int, str] = field(default_factory=dict)


class PostgresBus(BroadcastBackend):
    def __init__(self, url: str, on_lost: Callable[[str], None] | None = None) -> None:
        self._url = asyncpg_url(url)
        self._on_lost = on_lost
        self._closing = False
        self._listen: asyncpg.Connection | None = None
        self._publish: asyncpg.Connection | None = None
        self._listen_lock = asyncio.Lock()
        self._publish_lock = asyncio.Lock()
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._names: dict[str, str] = {}  # name at PostgreSQL -> channel
        self._partial: dict[tuple[int, str], _Partial] = {}

    async def connect(self) -> None:
        self._listen = await asyncpg.connect(
            self._url, server_settings={"application_name": f"{APPLICATION}-listen"}
        )
        self._listen.add_termination_listener(self._ended)
        self._publish = await asyncpg.connect(
            self._url, server_settings={"application_name": f"{APPLICATION}-publish"}
        )

    def _ended(self, _conn: Any) -> None:
        if self._closing:
            return
        why = "the PostgreSQL bus's listening connection ended"
        if self._on_lost is not None:
            self._on_lost(why)
        else:
            log.warning(why)

    async def disconnect(self) -> None:
        self._closing = True
        for conn in (self._listen, self._publish):
            if conn is None:
                continue
            try:
                async with asyncio.timeout(1.0):
                    await conn.close()
            except Exception:  # noqa: BLE001 - a dead or paused connection is dropped without a goodbye
                conn.terminate()
        self._listen = self._publish = None

    @property
    def listen_pid(self) -> int:
        """The server process of the listening connection (what an operator would terminate)."""
        return int(self._conn(self._listen).get_server_pid())

    def _conn(self, conn: asyncpg.Connection | None) -> asyncpg.Connection:
        if conn is None or conn.is_closed():
            raise ConnectionError("the PostgreSQL bus connection is closed")
        return conn

    async def subscribe(self, channel: str) -> None:
        name = bus_channel_name(channel)
        self._names[name] = channel
        async with self._listen_lock:
            await self._conn(self._listen).add_listener(name, self._on_notify)

    async def unsubscribe(self, channel: str) -> None:
        name = bus_channel_name(channel)
        self._names.pop(name, None)
        async with self._listen_lock:
            with contextlib.suppress(Exception):
                await self._conn(self._listen).remove_listener(name, self._on_notify)

    async def publish(self, channel: str, message: Any) -> None:
        name = bus_channel_name(channel)
        payloads = encode(str(message))
        async with self._publish_lock:
            conn = self._conn(self._publish)
            if len(payloads) == 1:
                await conn.execute("SELECT pg_notify($1, $2)", name, payloads[0])
                return
            async with conn.transaction():
                for payload in payloads:
                    await conn.execute("SELECT pg_notify($1, $2)", name, payload)

    def _on_notify(self, _conn: Any, pid: int, name: str, payload: str) -> None:
        channel = self._names.get(name, name)
        if payload.startswith("="):
            self._queue.put_nowait(Event(channel=channel, message=payload[1:]))
            return
        if not payload.startswith("#"):
            self._queue.put_nowait(Event(channel=channel, message=payload))  # someone else's NOTIFY
            return
        try:
            ident, index, total, piece = payload[1:].split(":", 3)
            key, i, n = (pid, ident), int(index), int(total)
        except ValueError:
            return
        now = time.monotonic()
        for stale in [k for k, p in self._partial.items() if now - p.started > PARTIAL_SECONDS]:
            del self._partial[stale]
        partial = self._partial.setdefault(key, _Partial(n))
        partial.pieces[i] = piece
        if len(partial.pieces) == partial.total:
            del self._partial[key]
            message = "".join(partial.pieces[j] for j in range(partial.total))
            self._queue.put_nowait(Event(channel=channel, message=message))

    async def next_published(self) -> Event:
        return await self._queue.get()
