"""The event bus (broadcaster: memory:// in one process, redis:// or postgres:// across several).

Events carry ids and revisions, never pending truth: a receiver re-reads the repository.

The bus keeps its own registry of the local subscriptions of every channel and holds one current
`broadcaster.Broadcast`, through which it subscribes each channel once ("pump"). A shared bus
(redis://, postgres://) is supervised: a process-private ping channel is published every
`ping_seconds` and must come back within `silence_seconds`; a failed or timed-out publish or
subscribe, or a missed heartbeat, drops the Broadcast (closed best-effort, with a timeout) and builds
a new one with bounded backoff, resubscribes every channel in use and proves a round trip before it
reports itself connected again. Local subscriptions live across reconnects: their iterators never
see the gap, except for an optional `after_gap` marker each receives once the bus is back (on it the
live hubs re-read and send snapshots, the token cache clears, waiters re-read their bundles). A
process back from a gap announces it on `GAP_CHANNEL`, and every other process delivers the same
markers: what the returning process could not publish never reached them either.
While the bus is not connected a publish fails at once with `BusUnavailable` (nothing was sent);
an attempted publish that fails or outlasts `publish_seconds` raises (it may have reached the broker).
A `namespace` prefixes every channel's name at the broker (`names.namespace_prefix`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broadcaster import Broadcast
from broadcaster._backends.base import BroadcastBackend
from broadcaster._base import Event as BroadcastEvent

from backend import faults, jsoncodec, metrics
from backend.background import stop_tasks
from backend.bus.names import namespace_prefix
from backend.domain.ids import new_id

log = logging.getLogger("turnwise.events")

TASK_CHANNEL = "turnwise.task"
PING_CHANNEL = "turnwise.bus.ping"
# A process back from a bus gap says so here: the others missed what it could not publish.
GAP_CHANNEL = "turnwise.bus.gaps"
# The `type` of the `after_gap` marker subscribers conventionally ask for.
BUS_GAP = "bus.reconnected"


class MissingBusBackend(RuntimeError):
    """The bus URL names a backend whose client package is not installed."""


class BusUnavailable(ConnectionError):
    """The bus is not connected right now: nothing was sent, so nothing can have been delivered."""


class BusState(StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"


def _scheme(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0]


def _require_backend(url: str) -> None:
    if _scheme(url) in ("redis", "rediss"):
        try:
            import redis.asyncio  # noqa: F401
        except ImportError as exc:
            raise MissingBusBackend(
                f"TURNWISE_BROADCAST_URL is {url.split(':', 1)[0]}:// but the redis package is not "
                "installed: pip install 'turnwise[redis]'"
            ) from exc


def _backend_for(url: str) -> BroadcastBackend:
    scheme = _scheme(url)
    if scheme in ("postgres", "postgresql"):
        from backend.bus.postgres import PostgresBus

        return PostgresBus(url)
    if scheme in ("redis", "rediss"):
        from backend.bus.redis_backend import RedisBus

        return RedisBus(url)
    # Anything else broadcaster knows (memory://) is built by broadcaster itself.
    return Broadcast(url)._backend


class _Broadcast(Broadcast):
    """broadcaster's Broadcast, whose listener hands every message to the bus's registry as it
    arrives (no queue of its own in between, so a subscription made after a message was dispatched
    never receives it) and reports a failing backend instead of dying silently."""

    def __init__(
        self,
        backend: BroadcastBackend,
        on_event: Callable[[_Broadcast, BroadcastEvent], None],
        on_error: Callable[[_Broadcast, Exception], None],
    ) -> None:
        super().__init__(backend=backend)
        self._on_event = on_event
        self._on_error = on_error

    async def _listener(self) -> None:
        try:
            while True:
                self._on_event(self, await self._backend.next_published())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the bus's supervisor
            self._on_error(self, exc)


@dataclass(eq=False)
class _Local:
    """One local subscription: its queue of raw messages and the marker it wants after a gap."""

    queue: asyncio.Queue[str | dict[str, Any]] = field(default_factory=asyncio.Queue)
    after_gap: str | None = None


@dataclass(eq=False)
class _Outgoing:
    """Messages queued for publication, with the future of a caller waiting for them (None: posted)."""

    messages: list[tuple[str, str]]
    done: asyncio.Future[None] | None
    what: str


# At most this many messages per batch the sender publishes (one pipelined round trip on Redis).
SEND_BATCH = 500
# How long closing a dropped connection may take (a paused broker answers nothing).
CLOSE_SECONDS = 1.0


@dataclass(eq=False)
class _Channel:
    name: str
    locals: set[_Local] = field(default_factory=set)
    pump: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    permanent: bool = False


class EventBus:
    def __init__(
        self,
        url: str,
        *,
        ping_seconds: float = 1.0,
        silence_seconds: float = 3.0,
        publish_seconds: float = 2.0,
        backoff: tuple[float, float] = (0.1, 2.0),
        namespace: str = "",
    ) -> None:
        _require_backend(url)
        self.url, self.namespace = url, namespace
        self._prefix = namespace_prefix(namespace)  # of every channel's name at the broker
        # memory:// reaches only this process and cannot fail: it is not supervised.
        self.shared = not url.startswith("memory://")
        self.ping_seconds = ping_seconds
        self.silence_seconds = silence_seconds
        self.publish_seconds = publish_seconds
        self.connect_seconds = max(3.0, publish_seconds)
        self.backoff = backoff
        self.state = BusState.DISCONNECTED
        self.reconnects = 0
        self.published = 0
        self.last_failure: str | None = None
        # When the bus was last found lost (wall clock): subscribers re-read what changed since.
        self.lost_at: dt.datetime | None = None
        self._broadcast: Broadcast | None = None
        self._backend: BroadcastBackend | None = None
        self._channels: dict[str, _Channel] = {}
        self._failed = asyncio.Event()
        self._pong = asyncio.Event()
        self._last_pong = 0.0
        self._ping_channel = f"{PING_CHANNEL}.{new_id()}"
        self._supervisor: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._outbox: collections.deque[_Outgoing] = collections.deque()
        self._outbox_ready = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._unsent = 0
        self._drained = asyncio.Event()
        self._drained.set()
        if self.shared:
            for permanent in (self._ping_channel, GAP_CHANNEL):
                self._channels[permanent] = _Channel(permanent, permanent=True)

    # --- state --------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.state == BusState.CONNECTED

    @property
    def backend(self) -> BroadcastBackend | None:
        """The broadcaster backend in use now (None while reconnecting)."""
        return self._backend

    def status(self) -> dict[str, Any]:
        """For `/readyz`: the bus state and how often it came back."""
        return {"state": self.state.value, "reconnects": self.reconnects}

    def _set_state(self, state: BusState) -> None:
        self.state = state
        metrics.BUS_CONNECTED.set(1 if state == BusState.CONNECTED else 0)

    # --- connect / disconnect -----------------------------------------------------------------

    def _new(self) -> tuple[Broadcast, BroadcastBackend]:
        backend = _backend_for(self.url)
        return _Broadcast(backend, self._deliver, self._listener_failed), backend

    def _broker(self, channel: str) -> str:
        return self._prefix + channel

    def _deliver(self, broadcast: Broadcast, event: BroadcastEvent) -> None:
        if broadcast is not self._broadcast:
            return  # a dropped connection's leftovers
        name, prefix = event.channel, self._prefix
        if not name.startswith(prefix):
            return  # another namespace's
        name = name[len(prefix) :]
        if name == self._ping_channel:
            self._last_pong = asyncio.get_running_loop().time()
            self._pong.set()
            return
        if name == GAP_CHANNEL:
            self._on_remote_gap(event.message)
            return
        channel = self._channels.get(name)
        if channel is None or not channel.locals:
            return
        message: str | dict[str, Any] = event.message
        if len(channel.locals) > 1:
            # Decoded once for every local subscriber (each gets its own shallow copy).
            with contextlib.suppress(ValueError):
                decoded = jsoncodec.loads(event.message)
                if isinstance(decoded, dict):
                    message = decoded
        for local in channel.locals:
            local.queue.put_nowait(message)

    def _listener_failed(self, broadcast: Broadcast, exc: Exception) -> None:
        self._fail(broadcast, f"listener failed: {exc!r}")

    async def connect(self) -> None:
        """The first connection: fails (raises) when the bus cannot be reached now."""
        if self.state != BusState.DISCONNECTED:
            return
        broadcast, backend = self._new()
        try:
            await self._open(broadcast, backend)
        except BaseException:
            self._drop()
            await self._close(broadcast, backend)
            raise
        self._set_state(BusState.CONNECTED)
        if self.shared:
            self._supervisor = asyncio.create_task(self._supervise())

    async def disconnect(self) -> None:
        # What was posted before the shutdown still goes out, within the publish bound.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.publish_seconds):
                await self._drained.wait()
        await stop_tasks([self._sender, self._supervisor], log, "bus task")
        self._sender = self._supervisor = None
        broadcast, backend = self._broadcast, self._backend
        self._drop()
        self._set_state(BusState.DISCONNECTED)
        if broadcast is not None and backend is not None:
            self._close_later(broadcast, backend)
        if self._closing:  # each close is bounded; one that swallowed its cancellation is not awaited
            await asyncio.wait(list(self._closing), timeout=2 * CLOSE_SECONDS)
        for task in list(self._closing):
            task.cancel()

    async def _open(self, broadcast: Broadcast, backend: BroadcastBackend) -> None:
        """Connect, subscribe every channel in use, and (shared bus) prove a round trip."""
        self._failed.clear()
        async with asyncio.timeout(self.connect_seconds if self.shared else None):
            await broadcast.connect()
            self._broadcast, self._backend = broadcast, backend
            for channel in self._channels.values():
                self._start_pump(channel, broadcast)
            await asyncio.gather(*(c.ready.wait() for c in list(self._channels.values())))
            if self.shared:
                while not self._failed.is_set():
                    self._pong.clear()
                    await broadcast.publish(channel=self._broker(self._ping_channel), message="1")
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.25):
                            await self._pong.wait()
                        break
        if self._failed.is_set():
            raise ConnectionError(f"the bus failed while connecting: {self.last_failure}")
        self._last_pong = asyncio.get_running_loop().time()

    def _drop(self) -> None:
        """Forget the current Broadcast: stop every pump (each will resubscribe on the next one)."""
        self._broadcast, self._backend = None, None
        for channel in self._channels.values():
            if channel.pump is not None:
                channel.pump.cancel()
            channel.pump = None
            channel.ready = asyncio.Event()

    async def _close(self, broadcast: Broadcast, backend: BroadcastBackend) -> None:
        """Close a dropped Broadcast best-effort, within a bound (a paused broker answers nothing)."""
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                try:
                    await broadcast.disconnect()
                except AttributeError:  # its connect failed before the listener existed
                    await backend.disconnect()
        except Exception as exc:  # noqa: BLE001 - the connection is gone either way
            log.debug("dropped bus connection did not close cleanly: %r", exc)

    def _close_later(self, broadcast: Broadcast, backend: BroadcastBackend) -> None:
        task = asyncio.create_task(self._close(broadcast, backend))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _fail(self, broadcast: Broadcast | None, why: str) -> None:
        """The Broadcast in use failed: the supervisor replaces it (stale reports are ignored)."""
        if broadcast is None or broadcast is not self._broadcast or not self.shared:
            return
        self.last_failure = why
        if self.state == BusState.CONNECTED:
            self.lost_at = dt.datetime.now(dt.UTC)
            log.warning("event bus lost", extra={"event": "bus.lost", "reason": why})
            self._set_state(BusState.RECONNECTING)
        self._failed.set()

    # --- supervision --------------------------------------------------------------------------

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                if self.state == BusState.CONNECTED:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.ping_seconds):
                            await self._failed.wait()
                    if self.state == BusState.CONNECTED:
                        broadcast = self._broadcast
                        if broadcast is None:
                            raise ConnectionError("no bus connection")  # never while connected
                        try:
                            async with asyncio.timeout(self.publish_seconds):
                                await broadcast.publish(channel=self._broker(self._ping_channel), message="1")
                        except Exception as exc:  # noqa: BLE001 - any failure is a lost bus
                            self._fail(broadcast, f"heartbeat not published: {exc!r}")
                        else:
                            if loop.time() - self._last_pong > self.silence_seconds:
                                self._fail(broadcast, f"no heartbeat for {self.silence_seconds:g}s")
                    continue
                await self._reconnect()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bus supervisor step failed", extra={"event": "bus.supervisor_failed"})
                await asyncio.sleep(self.backoff[0])

    async def _reconnect(self) -> None:
        self._set_state(BusState.RECONNECTING)
        started = time.monotonic()
        if self._broadcast is not None and self._backend is not None:
            self._close_later(self._broadcast, self._backend)
        self._drop()
        delay = self.backoff[0]
        attempts = 0
        while True:
            attempts += 1
            broadcast, backend = self._new()
            try:
                await self._open(broadcast, backend)
                break
            except asyncio.CancelledError:
                self._drop()
                await self._close(broadcast, backend)
                raise
            except Exception as exc:  # noqa: BLE001 - retried with backoff until the bus is back
                log.info(
                    "event bus still unreachable",
                    extra={"event": "bus.retry", "attempt": attempts, "error": repr(exc)},
                )
                self._drop()
                self._close_later(broadcast, backend)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff[1])
        self.reconnects += 1
        metrics.BUS_RECONNECTS.inc()
        self._set_state(BusState.CONNECTED)
        log.warning(
            "event bus reconnected",
            extra={
                "event": "bus.reconnected",
                "attempts": attempts,
                "seconds": round(time.monotonic() - started, 3),
                "reconnects": self.reconnects,
            },
        )
        # Every other process may have missed what this one failed to publish: tell them.
        lost_at = self.lost_at.isoformat() if self.lost_at is not None else None
        try:
            await self.publish(GAP_CHANNEL, {"from": self._ping_channel, "lost_at": lost_at})
        except Exception:  # noqa: BLE001 - the next gap tells them; this process resyncs anyway
            log.warning("bus gap not announced", extra={"event": "bus.gap_unannounced"})
        self._after_gap()

    def _after_gap(self) -> None:
        """Events may have been lost: every subscription that asked for it gets its marker."""
        for channel in self._channels.values():
            for local in channel.locals:
                if local.after_gap is not None:
                    local.queue.put_nowait(local.after_gap)

    def _on_remote_gap(self, message: str) -> None:
        """Another process came back from a gap: what it published meanwhile never arrived here."""
        try:
            data = jsoncodec.loads(message)
        except ValueError:
            return
        if not isinstance(data, dict) or data.get("from") == self._ping_channel:
            return
        with contextlib.suppress(TypeError, ValueError):
            # Resyncs re-read changes since the earlier of the two processes' losses.
            remote = dt.datetime.fromisoformat(str(data.get("lost_at")))
            self.lost_at = remote if self.lost_at is None else min(self.lost_at, remote)
        log.info("another process had a bus gap", extra={"event": "bus.remote_gap"})
        self._after_gap()

    # --- channels -----------------------------------------------------------------------------

    def _start_pump(self, channel: _Channel, broadcast: Broadcast) -> None:
        channel.ready = asyncio.Event()
        channel.pump = asyncio.create_task(self._pump(channel, broadcast, channel.ready))

    async def _pump(self, channel: _Channel, broadcast: Broadcast, ready: asyncio.Event) -> None:
        """Holds the one broadcaster subscription of a channel (the listener delivers its messages)."""
        try:
            async with broadcast.subscribe(channel=self._broker(channel.name)):
                ready.set()
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the supervisor, which resubscribes
            self._fail(broadcast, f"subscription of {channel.name} failed: {exc!r}")

    async def publish(self, channel: str, event: dict[str, Any]) -> None:
        """Publish one message once everything queued before it went out; raises `BusUnavailable`
        while the bus is not connected, or the failure of an attempted publish."""
        await self.publish_many([(channel, event)])

    async def publish_many(self, messages: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Publish in order and wait until the broker took them (raises like `publish`). They join the
        ordered outgoing queue, so they never overtake messages posted before them."""
        if not messages:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(messages, done, "")
        await done

    async def drained(self) -> None:
        """Wait until everything queued for publication so far went out (or failed)."""
        await self._drained.wait()

    def post_many(self, messages: Sequence[tuple[str, dict[str, Any]]], what: str) -> None:
        """Queue messages for publication in order and return at once: a committed write need not
        wait for the broker's round trip. One sender publishes everything queued meanwhile as one
        batch (one pipelined round trip on Redis). A failure is logged with `what`, never raised:
        the commit already happened and clients converge on their next read."""
        if messages:
            self._enqueue(messages, None, what)

    def _enqueue(
        self, messages: Sequence[tuple[str, dict[str, Any]]], done: asyncio.Future[None] | None, what: str
    ) -> None:
        prefix = self._prefix
        encoded = [(prefix + channel, jsoncodec.dumps(event)) for channel, event in messages]
        self._outbox.append(_Outgoing(encoded, done, what))
        self._outbox_ready.set()
        self._unsent += len(encoded)
        self._drained.clear()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_queued())

    async def _send_queued(self) -> None:
        """The one sender: drains the outgoing queue in order, a batch at a time."""
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            while self._outbox:
                batch: list[_Outgoing] = []
                size = 0
                while self._outbox and size < SEND_BATCH:
                    item = self._outbox.popleft()
                    batch.append(item)
                    size += len(item.messages)
                try:
                    await self._send([m for item in batch for m in item.messages])
                except Exception as exc:  # noqa: BLE001 - reported to each waiting caller, logged for posts
                    for item in batch:
                        if item.done is not None:
                            if not item.done.done():
                                item.done.set_exception(exc)
                        elif isinstance(exc, BusUnavailable):
                            log.warning("events not published: bus unavailable", extra={"event": item.what})
                        else:
                            log.error("event publication failed: %r", exc, extra={"event": item.what})
                else:
                    for item in batch:
                        if item.done is not None and not item.done.done():
                            item.done.set_result(None)
                finally:
                    self._unsent -= size
                    if not self._unsent:
                        self._drained.set()

    async def _send(self, encoded: list[tuple[str, str]]) -> None:
        broadcast = self._broadcast
        many = getattr(self._backend, "publish_many", None)
        if not self.shared:
            if broadcast is None:
                raise BusUnavailable("the event bus is not connected")
            for channel, message in encoded:
                await broadcast.publish(channel=channel, message=message)
                self.published += 1
            return
        if broadcast is None or self.state != BusState.CONNECTED:
            raise BusUnavailable(f"the event bus is {self.state.value}")
        try:
            async with asyncio.timeout(self.publish_seconds):
                if many is not None:
                    await many(encoded)
                else:
                    for channel, message in encoded:
                        await broadcast.publish(channel=channel, message=message)
        except Exception as exc:
            self._fail(broadcast, f"publish failed: {exc!r}")
            raise
        self.published += len(encoded)

    @asynccontextmanager
    async def subscribe(
        self, channel: str, *, after_gap: dict[str, Any] | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Subscribe for the block. Active at the broker when this returns while the bus is
        connected; otherwise registered, and subscribed as soon as the bus is back. `after_gap`:
        a message this subscription receives each time the bus came back after a gap."""
        await faults.hit("bus.subscribe")  # lets a test prove that nothing subscribed
        local = _Local(after_gap=None if after_gap is None else jsoncodec.dumps(after_gap))
        entry = self._channels.get(channel)
        if entry is None:
            entry = self._channels[channel] = _Channel(channel)
        entry.locals.add(local)
        try:
            broadcast = self._broadcast
            if entry.pump is None and broadcast is not None and self.state == BusState.CONNECTED:
                self._start_pump(entry, broadcast)
            if entry.pump is not None and not entry.ready.is_set():
                ready = entry.ready
                try:
                    async with asyncio.timeout(self.publish_seconds if self.shared else None):
                        await ready.wait()
                except TimeoutError:
                    self._fail(broadcast, f"subscription of {channel} timed out")

            async def events() -> AsyncIterator[dict[str, Any]]:
                while True:
                    message = await local.queue.get()
                    yield jsoncodec.loads(message) if isinstance(message, str) else dict(message)

            yield events()
        finally:
            entry.locals.discard(local)
            if not entry.locals and not entry.permanent and self._channels.get(channel) is entry:
                del self._channels[channel]
                if entry.pump is not None:
                    entry.pump.cancel()

    @property
    def channel_count(self) -> int:
        return len(self._channels)
