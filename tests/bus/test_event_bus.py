"""The event bus itself over real brokers that fail: Redis stopped and restarted, Redis paused and
resumed, the PostgreSQL bus's listening connection terminated. A subscription outlives the outage,
hears that there was a gap, and receives what is published once the bus is back; a publish during
the outage fails instead of hanging."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from redis.asyncio import Redis

from backend.bus import BUS_GAP, BusState, BusUnavailable, EventBus
from backend.bus.postgres import PostgresBus, encode
from tests.bus.support import (
    RedisProcess,
    eventually,
    pg_bus_url,
    redis_process,
    terminate_backend,
    terminate_bus_listeners,
)


def fast_bus(url: str) -> EventBus:
    return EventBus(url, ping_seconds=0.3, silence_seconds=1.5, publish_seconds=1.0)


@dataclass
class Broker:
    url: str
    kind: str
    brk: Callable[[], Awaitable[None]]
    heal: Callable[[], Awaitable[None]]


@asynccontextmanager
async def broker(fault: str, pg_url: str | None) -> AsyncIterator[Broker]:
    if fault == "pg-terminate":
        assert pg_url is not None

        async def brk() -> None:
            assert await terminate_bus_listeners(pg_url) >= 1

        async def nothing() -> None:
            return None

        yield Broker(pg_bus_url(pg_url), "postgres", brk, nothing)
        return
    with redis_process() as redis:
        yield Broker(redis.url, "redis", *_redis_fault(redis, fault))


def _redis_fault(redis: RedisProcess, fault: str) -> tuple[Callable[[], Awaitable[None]], ...]:
    async def stop() -> None:
        await asyncio.to_thread(redis.stop)

    async def start() -> None:
        await asyncio.to_thread(redis.start)

    async def pause() -> None:
        redis.pause()

    async def resume() -> None:
        redis.resume()

    return (stop, start) if fault == "redis-restart" else (pause, resume)


FAULTS = ["redis-restart", "redis-pause", "pg-terminate"]


@pytest.fixture(params=FAULTS)
def fault(request: pytest.FixtureRequest) -> str:
    if request.param == "pg-terminate":
        request.getfixturevalue("pg_url")
    return str(request.param)


@pytest.fixture
def pg_for(fault: str, request: pytest.FixtureRequest) -> str | None:
    return str(request.getfixturevalue("pg_url")) if fault == "pg-terminate" else None


async def test_a_subscription_outlives_a_bus_outage_and_hears_of_the_gap(
    fault: str, pg_for: str | None
) -> None:
    async with broker(fault, pg_for) as b:
        bus = fast_bus(b.url)
        await bus.connect()
        got: list[dict[str, Any]] = []
        try:
            async with bus.subscribe("t.one", after_gap={"type": BUS_GAP}) as events:

                async def collect() -> None:
                    async for e in events:
                        got.append(e)

                reader = asyncio.create_task(collect())
                await bus.publish("t.one", {"n": 1})
                await eventually(lambda: _async(got == [{"n": 1}]), what="first event")
                await b.brk()
                if fault != "pg-terminate":
                    await eventually(lambda: _async(bus.state != BusState.CONNECTED), what="bus lost")
                    # While the broker is gone, a publish fails (at once, or after its own timeout).
                    with pytest.raises((ConnectionError, TimeoutError, OSError)):
                        await asyncio.wait_for(bus.publish("t.one", {"n": "lost"}), 30)
                    status = bus.status()
                    assert status["state"] == "reconnecting"
                await b.heal()
                await eventually(lambda: _async(bus.reconnects >= 1 and bus.connected), what="reconnected")
                await eventually(lambda: _async({"type": BUS_GAP} in got), what="gap marker")
                await bus.publish("t.one", {"n": 2})
                await eventually(lambda: _async({"n": 2} in got), what="event after the gap")
                assert {"n": "lost"} not in got
                assert got.count({"n": 2}) == 1
                reader.cancel()
        finally:
            await bus.disconnect()


async def _async(value: Any) -> Any:
    return value


@pytest.fixture(params=["redis", "postgres"])
def pg_or_redis(request: pytest.FixtureRequest) -> str | None:
    """None: a Redis of the test's own; else the PostgreSQL database the bus runs on."""
    return str(request.getfixturevalue("pg_url")) if request.param == "postgres" else None


async def test_a_backend_reports_its_lost_listening_connection_and_the_bus_reconnects(
    pg_or_redis: str | None,
) -> None:
    """Only the listening connection ends (the broker stays up, publishes go on) and the heartbeat's
    silence bound is far off: the backend's own report is all that can tell the bus."""
    async with contextlib.AsyncExitStack() as stack:
        if pg_or_redis is None:
            url = stack.enter_context(redis_process()).url

            async def cut() -> None:
                client = Redis.from_url(url)
                try:
                    assert await client.client_kill_filter(_type="pubsub") >= 1
                finally:
                    await client.aclose()

        else:
            pg_url, url = pg_or_redis, pg_bus_url(pg_or_redis)

            async def cut() -> None:
                assert await terminate_bus_listeners(pg_url) >= 1

        bus = EventBus(url, ping_seconds=0.3, silence_seconds=600, publish_seconds=1.0)
        await bus.connect()
        stack.push_async_callback(bus.disconnect)
        got: list[dict[str, Any]] = []
        events = await stack.enter_async_context(bus.subscribe("t.cut", after_gap={"type": BUS_GAP}))

        async def collect() -> None:
            async for e in events:
                got.append(e)

        reader = asyncio.create_task(collect())
        stack.callback(reader.cancel)
        await cut()
        await eventually(lambda: _async(bus.reconnects >= 1 and bus.connected), what="reconnected")
        await eventually(lambda: _async({"type": BUS_GAP} in got), what="gap marker")
        await bus.publish("t.cut", {"n": 1})
        await eventually(lambda: _async({"n": 1} in got), what="an event after the gap")


async def test_the_postgres_bus_takes_concurrent_and_large_messages_and_long_channel_names(
    pg_url: str,
) -> None:
    bus = fast_bus(pg_bus_url(pg_url))
    await bus.connect()
    long_channel = "turnwise.prompt_acks." + "x" * 80
    big = {"blob": "é" * 20_000 + "z" * 30_000}
    got: list[dict[str, Any]] = []
    try:
        async with bus.subscribe(long_channel) as events:

            async def collect() -> None:
                async for e in events:
                    got.append(e)

            reader = asyncio.create_task(collect())
            # broadcaster's own backend fails these with "another operation is in progress".
            await asyncio.gather(
                *(bus.publish(long_channel, {"n": i}) for i in range(50)), bus.publish(long_channel, big)
            )
            await eventually(lambda: _async(len(got) == 51), what="all 51 messages")
            assert sorted(e["n"] for e in got if "n" in e) == list(range(50))
            assert big in got
            reader.cancel()
    finally:
        await bus.disconnect()
    assert len(encode(json.dumps(big))) > 1  # it really went in chunks


async def test_a_process_back_from_a_gap_makes_the_others_resync_too(pg_url: str) -> None:
    """Only one process loses its bus; what it could not publish meanwhile never reached the other,
    so its announcement gives the other process the same after-gap treatment."""
    lost, other = fast_bus(pg_bus_url(pg_url)), fast_bus(pg_bus_url(pg_url))
    await lost.connect()
    await other.connect()
    got: list[dict[str, Any]] = []
    try:
        async with other.subscribe("t.gap", after_gap={"type": BUS_GAP}) as events:

            async def collect() -> None:
                async for e in events:
                    got.append(e)

            reader = asyncio.create_task(collect())
            backend = lost.backend  # the test terminates exactly this bus's listener
            assert isinstance(backend, PostgresBus)
            assert await terminate_backend(pg_url, backend.listen_pid)
            await eventually(lambda: _async(lost.reconnects >= 1 and lost.connected), what="reconnected")
            await eventually(lambda: _async({"type": BUS_GAP} in got), what="the other's gap marker")
            assert other.reconnects == 0
            await lost.publish("t.gap", {"n": 1})
            await eventually(lambda: _async({"n": 1} in got), what="an event after the gap")
            reader.cancel()
    finally:
        await lost.disconnect()
        await other.disconnect()


async def test_posted_and_awaited_publishes_keep_their_order_and_a_post_during_an_outage_only_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Units post their events and go on; the one sender publishes them in order, batched, and an
    awaited publish never overtakes what was posted before it. While the broker is gone a post
    returns at once and its failure is logged, and an awaited publish raises."""
    with redis_process() as redis:
        bus = fast_bus(redis.url)
        await bus.connect()
        got: list[dict[str, Any]] = []
        try:
            async with bus.subscribe("t.order") as events:

                async def collect() -> None:
                    async for e in events:
                        got.append(e)

                reader = asyncio.create_task(collect())
                for unit in range(50):
                    bus.post_many([("t.order", {"n": unit, "i": i}) for i in range(3)], "test.unit")
                await bus.publish("t.order", {"n": "last"})
                await eventually(lambda: _async(len(got) == 151), what="every message")
                assert got == [{"n": u, "i": i} for u in range(50) for i in range(3)] + [{"n": "last"}]

                await asyncio.to_thread(redis.stop)
                await eventually(lambda: _async(bus.state != BusState.CONNECTED), what="bus lost")
                bus.post_many([("t.order", {"n": "lost"})], "test.lost")
                await asyncio.wait_for(bus.drained(), 10)
                assert "events not published: bus unavailable" in caplog.text
                with pytest.raises(BusUnavailable):
                    await bus.publish("t.order", {"n": "lost too"})
                reader.cancel()
        finally:
            await bus.disconnect()


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_buses_of_different_namespaces_on_one_broker_hear_only_their_own(
    kind: str, pg_url: str
) -> None:
    """Two deployments (or test runs) sharing one Redis or PostgreSQL: each hears its own namespace's
    messages, heartbeats and gap markers, never the other's; an empty namespace is the channels' own
    names, and a namespace the broker could not take is refused up front."""
    from tests.conftest import redis_url

    url = redis_url() if kind == "redis" else pg_bus_url(pg_url)
    first, second, first_too = (
        EventBus(url, ping_seconds=0.3, silence_seconds=1.5, namespace=n) for n in ("ns-a", "ns-b", "ns-a")
    )
    plain = fast_bus(url)
    buses = (first, second, first_too, plain)
    for bus in buses:
        await bus.connect()
    got: dict[str, list[dict[str, Any]]] = {"a": [], "b": [], "plain": []}
    try:
        async with (
            first.subscribe("t.ns") as a_events,
            second.subscribe("t.ns") as b_events,
            plain.subscribe("t.ns") as plain_events,
        ):

            async def collect(events: Any, into: list[dict[str, Any]]) -> None:
                async for e in events:
                    into.append(e)

            readers = [
                asyncio.create_task(collect(a_events, got["a"])),
                asyncio.create_task(collect(b_events, got["b"])),
                asyncio.create_task(collect(plain_events, got["plain"])),
            ]
            await first_too.publish("t.ns", {"from": "a"})
            await second.publish("t.ns", {"from": "b"})
            await plain.publish("t.ns", {"from": "plain"})
            await eventually(lambda: _async(all(got.values())), what="each bus's own message")
            await asyncio.sleep(1.0)  # heartbeats go on meanwhile: each bus hears only its own
            assert got == {"a": [{"from": "a"}], "b": [{"from": "b"}], "plain": [{"from": "plain"}]}
            assert all(bus.connected and bus.reconnects == 0 for bus in buses)
            for reader in readers:
                reader.cancel()
    finally:
        for bus in buses:
            await bus.disconnect()
    with pytest.raises(ValueError, match="namespace"):
        EventBus(url, namespace="no spaces or slashes/")
