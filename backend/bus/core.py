"""The event bus (broadcaster: memory:// in one process, redis:// or postgres:// across several).

Events carry ids and revisions, never pending truth: a receiver re-reads the repository.

The bus keeps its own registry of the local subscriptions of every channel and holds one current
`Link` (a `broadcaster.Broadcast`, used through its public API), through which it subscribes each
channel once ("pump"). A shared bus (redis://, postgres://) is supervised: a process-private ping
channel is published every `ping_seconds` and must come back within `silence_seconds`; a failed or
timed-out publish or subscribe, a backend reporting its connection lost, or a missed heartbeat drops
the link (closed best-effort, with a timeout) and opens a new one with bounded backoff, resubscribes
every channel in use and proves a round trip before it reports itself connected again. Local
subscriptions live across reconnects: their iterators never see the gap, except for an optional
`after_gap` marker each receives once the bus is back (on it the live hubs re-read and send
snapshots, the token cache clears, waiters re-read their bundles). A process back from a gap
announces it on `GAP_CHANNEL`, and every other process delivers the same markers: what the
returning process could not publish never reached them either. `follow` is the one way a service
listens for as long as it runs: the bus resubscribes it, and its handler hears of every gap.
While the bus is not connected a publish fails at once with `BusUnavailable` (nothing was sent);
an attempted publish that fails or outlasts `publish_seconds` raises (it may have reached the broker).
A `namespace` prefixes every channel's name at the broker (`names.namespace_prefix`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broadcaster import BroadcastBackend, Event

from backend import faults, jsoncodec, metrics
from backend.background import stop_tasks
from backend.bus.follow import Handler, follow
from backend.bus.link import CLOSE_SECONDS, Link, scheme
from backend.bus.names import namespace_prefix
from backend.bus.outbox import BusUnavailable, Outbox
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


class BusState(StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"


def _require_backend(url: str) -> None:
    if scheme(url) in ("redis", "rediss"):
        try:
            import redis.asyncio  # noqa: F401
        except ImportError as exc:
            raise MissingBusBackend(
                f"TURNWISE_BROADCAST_URL is {url.split(':', 1)[0]}:// but the redis package is not "
                "installed: pip install 'turnwise[redis]'"
            ) from exc


@dataclass(eq=False)
class _Local:
    """One local subscription: its queue of raw messages and the marker it wants after a gap."""

    queue: asyncio.Queue[str | dict[str, Any]] = field(default_factory=asyncio.Queue)
    after_gap: str | None = None


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
        self._link: Link | None = None
        self._channels: dict[str, _Channel] = {}
        self._failed = asyncio.Event()
        self._pong = asyncio.Event()
        self._last_pong = 0.0
        self._ping_channel = f"{PING_CHANNEL}.{new_id()}"
        self._supervisor: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._outbox = Outbox(self._send)
        if self.shared:
            for permanent in (self._ping_channel, GAP_CHANNEL):
                self._channels[permanent] = _Channel(permanent, permanent=True)

    # --- state --------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.state == BusState.CONNECTED

    @property
    def backend(self) -> BroadcastBackend | None:
        """Our broadcaster backend in use now (None while reconnecting, and on memory://)."""
        return None if self._link is None else self._link.backend

    def status(self) -> dict[str, Any]:
        """For `/readyz`: the bus state and how often it came back."""
        return {"state": self.state.value, "reconnects": self.reconnects}

    def _set_state(self, state: BusState) -> None:
        self.state = state
        metrics.BUS_CONNECTED.set(1 if state == BusState.CONNECTED else 0)

    # --- connect / disconnect -----------------------------------------------------------------

    def _broker(self, channel: str) -> str:
        return self._prefix + channel

    def _deliver(self, link: Link, event: Event) -> None:
        if link is not self._link:
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

    async def connect(self) -> None:
        """The first connection: fails (raises) when the bus cannot be reached now."""
        if self.state != BusState.DISCONNECTED:
            return
        link = Link(self.url, self._fail)
        try:
            await self._open(link)
        except BaseException:
            self._drop()
            await link.close()
            raise
        self._set_state(BusState.CONNECTED)
        if self.shared:
            self._supervisor = asyncio.create_task(self._supervise(), name="turnwise-bus-supervisor")

    async def disconnect(self) -> None:
        # What was posted before the shutdown still goes out, within the publish bound.
        await self._outbox.stop(self.publish_seconds)
        await stop_tasks([self._supervisor], log, "bus task")
        self._supervisor = None
        link = self._link
        self._drop()
        self._set_state(BusState.DISCONNECTED)
        if link is not None:
            self._close_later(link)
        if self._closing:  # each close is bounded; one that swallowed its cancellation is not awaited
            await asyncio.wait(list(self._closing), timeout=2 * CLOSE_SECONDS)
        for task in list(self._closing):
            task.cancel()

    async def _open(self, link: Link) -> None:
        """Connect, subscribe every channel in use, and (shared bus) prove a round trip."""
        self._failed.clear()
        async with asyncio.timeout(self.connect_seconds if self.shared else None):
            await link.connect()
            self._link = link
            for channel in self._channels.values():
                self._start_pump(channel, link)
            await asyncio.gather(*(c.ready.wait() for c in list(self._channels.values())))
            while self.shared and not self._failed.is_set():
                self._pong.clear()
                await link.publish([(self._broker(self._ping_channel), "1")])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.25):
                        await self._pong.wait()
                    break
        if self._failed.is_set():
            raise ConnectionError(f"the bus failed while connecting: {self.last_failure}")
        self._last_pong = asyncio.get_running_loop().time()

    def _drop(self) -> None:
        """Forget the current link: stop every pump (each will resubscribe on the next one)."""
        self._link = None
        for channel in self._channels.values():
            if channel.pump is not None:
                channel.pump.cancel()
            channel.pump = None
            channel.ready = asyncio.Event()

    def _close_later(self, link: Link) -> None:
        task = asyncio.create_task(link.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _fail(self, link: Link | None, why: str) -> None:
        """The link in use failed: the supervisor replaces it (stale reports are ignored)."""
        if link is None or link is not self._link or not self.shared:
            return
        self.last_failure = why
        if self.state == BusState.CONNECTED:
            self.lost_at = dt.datetime.now(dt.UTC)
            log.warning("event bus lost", extra={"event": "bus.lost", "reason": why})
            self._set_state(BusState.RECONNECTING)
        self._failed.set()

    # --- supervision --------------------------------------------------------------------------

    async def _supervise(self) -> None:
        while True:
            try:
                if self.state == BusState.CONNECTED:
                    await self._beat()
                else:
                    await self._reconnect()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bus supervisor step failed", extra={"event": "bus.supervisor_failed"})
                await asyncio.sleep(self.backoff[0])

    async def _beat(self) -> None:
        """One heartbeat: wait a period (or a failure), then ping, and check the last one came back."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.ping_seconds):
                await self._failed.wait()
        link = self._link
        if self.state != BusState.CONNECTED or link is None:
            return
        try:
            async with asyncio.timeout(self.publish_seconds):
                await link.publish([(self._broker(self._ping_channel), "1")])
        except Exception as exc:  # noqa: BLE001 - any failure is a lost bus
            self._fail(link, f"heartbeat not published: {exc!r}")
        else:
            if asyncio.get_running_loop().time() - self._last_pong > self.silence_seconds:
                self._fail(link, f"no heartbeat for {self.silence_seconds:g}s")

    async def _reconnect(self) -> None:
        self._set_state(BusState.RECONNECTING)
        started = time.monotonic()
        if self._link is not None:
            self._close_later(self._link)
        self._drop()
        attempts = await self._reopen()
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

    async def _reopen(self) -> int:
        """Open a new link, with backoff, until one works: how many attempts it took."""
        delay = self.backoff[0]
        attempts = 0
        while True:
            attempts += 1
            link = Link(self.url, self._fail)
            try:
                await self._open(link)
                return attempts
            except asyncio.CancelledError:
                self._drop()
                await link.close()
                raise
            except Exception as exc:  # noqa: BLE001 - retried with backoff until the bus is back
                log.info(
                    "event bus still unreachable",
                    extra={"event": "bus.retry", "attempt": attempts, "error": repr(exc)},
                )
                self._drop()
                self._close_later(link)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff[1])

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

    def _start_pump(self, channel: _Channel, link: Link) -> None:
        channel.ready = asyncio.Event()
        channel.pump = asyncio.create_task(self._pump(channel, link, channel.ready))

    async def _pump(self, channel: _Channel, link: Link, ready: asyncio.Event) -> None:
        """Holds the one broker subscription of a channel, delivering its messages to the registry."""
        try:
            await link.hold(self._broker(channel.name), ready, self._deliver)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the supervisor, which resubscribes
            self._fail(link, f"subscription of {channel.name} failed: {exc!r}")

    # --- publishing ---------------------------------------------------------------------------

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
        self._outbox.put(self._encode(messages), done, "")
        await done

    async def drained(self) -> None:
        """Wait until everything queued for publication so far went out (or failed)."""
        await self._outbox.drained()

    def post_many(self, messages: Sequence[tuple[str, dict[str, Any]]], what: str) -> None:
        """Queue messages for publication in order and return at once: a committed write need not
        wait for the broker's round trip. One sender publishes everything queued meanwhile as one
        batch (one pipelined round trip on Redis). A failure is logged with `what`, never raised:
        the commit already happened and clients converge on their next read."""
        if messages:
            self._outbox.put(self._encode(messages), None, what)

    def _encode(self, messages: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
        prefix = self._prefix
        return [(prefix + channel, jsoncodec.dumps(event)) for channel, event in messages]

    async def _send(self, encoded: list[tuple[str, str]]) -> None:
        """Publish one batch of the outbox on the current link."""
        link = self._link
        if not self.shared:
            if link is None:
                raise BusUnavailable("the event bus is not connected")
            await link.publish(encoded)
            self.published += len(encoded)
            return
        if link is None or self.state != BusState.CONNECTED:
            raise BusUnavailable(f"the event bus is {self.state.value}")
        try:
            async with asyncio.timeout(self.publish_seconds):
                await link.publish(encoded)
        except Exception as exc:
            self._fail(link, f"publish failed: {exc!r}")
            raise
        self.published += len(encoded)

    # --- subscribing --------------------------------------------------------------------------

    @asynccontextmanager
    async def subscribe(
        self, channel: str, *, after_gap: dict[str, Any] | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Subscribe for the block. Active at the broker when this returns while the bus is
        connected; otherwise registered, and subscribed as soon as the bus is back. `after_gap`:
        a message this subscription receives each time the bus came back after a gap. A message
        that is not a JSON object (another publisher's, on a shared broker) is skipped."""
        await faults.hit("bus.subscribe")  # lets a test prove that nothing subscribed
        local = _Local(after_gap=None if after_gap is None else jsoncodec.dumps(after_gap))
        entry = self._channels.get(channel)
        if entry is None:
            entry = self._channels[channel] = _Channel(channel)
        entry.locals.add(local)
        try:
            link = self._link
            if entry.pump is None and link is not None and self.state == BusState.CONNECTED:
                self._start_pump(entry, link)
            if entry.pump is not None and not entry.ready.is_set():
                ready = entry.ready
                try:
                    async with asyncio.timeout(self.publish_seconds if self.shared else None):
                        await ready.wait()
                except TimeoutError:
                    self._fail(link, f"subscription of {channel} timed out")
            yield _events(channel, local.queue)
        finally:
            entry.locals.discard(local)
            if not entry.locals and not entry.permanent and self._channels.get(channel) is entry:
                del self._channels[channel]
                if entry.pump is not None:
                    entry.pump.cancel()

    async def follow(
        self, channel: str, handle: Handler, *, after_gap: dict[str, Any] | None = None
    ) -> asyncio.Task[None]:
        """Follow `channel` for as long as the returned task runs (`follow.follow`): the bus
        resubscribes it, and `handle` gets the `after_gap` marker after every gap."""
        return await follow(self, channel, handle, after_gap=after_gap)

    @property
    def channel_count(self) -> int:
        return len(self._channels)


async def _events(channel: str, queue: asyncio.Queue[str | dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    while True:
        message = await queue.get()
        if isinstance(message, dict):
            yield dict(message)
            continue
        try:
            decoded = jsoncodec.loads(message)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            yield decoded
        else:
            log.warning(
                "bus message is not a JSON object", extra={"event": "bus.bad_message", "channel": channel}
            )
