"""The event bus: publish -> local subscriber latency and burst rate on memory://, Redis and the
PostgreSQL bus, and how long the bus takes to come back after a fault (Redis restarted, Redis paused
for 5 s, the PostgreSQL bus's listener terminated), with the default supervision settings.

Redis is a `redis-server` of the bench's own on a free port (never a shared one); PostgreSQL is a
fresh database of TURNWISE_BENCH_PG_URL's server.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

from backend.bus import BUS_GAP, EventBus
from backend.db.engine import Database
from bench.common import PG_URL, fresh_database, median, pct, run, write_result
from tests.bus.support import RedisProcess, redis_process

MESSAGES = 500
BURST = 2_000


@contextlib.asynccontextmanager
async def _listening(bus: EventBus, channel: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    async with bus.subscribe(channel, after_gap={"type": BUS_GAP}) as events:

        async def pump() -> None:
            async for e in events:
                queue.put_nowait(e)

        task = asyncio.create_task(pump())
        try:
            yield queue
        finally:
            task.cancel()


async def _latency(url: str) -> dict[str, Any]:
    bus = EventBus(url)
    await bus.connect()
    try:
        async with _listening(bus, "bench.bus") as got:
            samples = []
            for i in range(MESSAGES):
                start = time.perf_counter()
                await bus.publish("bench.bus", {"i": i})
                while (await got.get()).get("i") != i:
                    pass
                samples.append(time.perf_counter() - start)
            start = time.perf_counter()
            await asyncio.gather(*(bus.publish("bench.bus", {"b": i}) for i in range(BURST)))
            received = 0
            while received < BURST:
                if "b" in await got.get():
                    received += 1
            burst = time.perf_counter() - start
        return {
            "p50_ms": round(median(samples) * 1000, 3),
            "p99_ms": round(pct(samples, 99) * 1000, 3),
            "burst_per_s": round(BURST / burst),
        }
    finally:
        await bus.disconnect()


async def _recovery(
    url: str, brk: Callable[[], Awaitable[None]], heal: Callable[[], Awaitable[None]]
) -> dict[str, Any]:
    """Seconds from the fault to the bus noticing, and from healing to a delivered event."""
    bus = EventBus(url)
    await bus.connect()
    try:
        async with _listening(bus, "bench.recovery") as got:
            broken = time.perf_counter()
            await brk()
            await _until(lambda: not bus.connected or bus.reconnects > 0)
            noticed = time.perf_counter() - broken
            await heal()
            healed = time.perf_counter()  # the broker is back
            await _until(lambda: bus.connected and bus.reconnects >= 1)
            back = time.perf_counter() - healed
            await bus.publish("bench.recovery", {"after": True})
            while "after" not in await got.get():
                pass
            delivered = time.perf_counter() - healed
        return {
            "noticed_s": round(noticed, 2),
            "connected_s": round(back, 2),
            "delivering_s": round(delivered, 2),
        }
    finally:
        await bus.disconnect()


async def _until(condition: Callable[[], bool]) -> None:
    """Poll a state flag of the bus (it has no event to wait on)."""
    for _ in range(6000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("the bus did not reach the state within 60 s")


async def _terminate_listeners(database_url: str) -> None:
    db = Database(PG_URL)
    try:
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :db AND application_name = 'turnwise-bus-listen'"
                ),
                {"db": make_url(database_url).database},
            )
    finally:
        await db.dispose()


async def all_figures() -> dict[str, Any]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("bench bus needs redis-server on PATH")
    with redis_process(binary) as redis:
        return await _figures(redis)


async def _figures(redis: RedisProcess) -> dict[str, Any]:
    db, drop = await fresh_database("postgresql")
    pg_bus = make_url(db.url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        latency = {
            "memory": await _latency("memory://"),
            "redis": await _latency(redis.url),
            "postgres": await _latency(pg_bus),
        }

        async def stop() -> None:
            await asyncio.to_thread(redis.stop)

        async def start() -> None:
            await asyncio.to_thread(redis.start)

        paused_at = [0.0]

        async def pause() -> None:
            redis.pause()
            paused_at[0] = time.perf_counter()

        async def resume() -> None:
            # Paused for 5 s in all: what is left after the bus noticed.
            await asyncio.sleep(max(0.0, 5 - (time.perf_counter() - paused_at[0])))
            redis.resume()

        async def terminate() -> None:
            await _terminate_listeners(db.url)

        async def nothing() -> None:
            return None

        recovery = {
            "redis_restart": await _recovery(redis.url, stop, start),
            "redis_pause_5s": await _recovery(redis.url, pause, resume),
            "postgres_listener_terminated": await _recovery(pg_bus, terminate, nothing),
        }
    finally:
        await drop()
    return {"latency": latency, "recovery": recovery}


def main() -> None:
    figures = run(all_figures())
    for name, f in figures["latency"].items():
        print(
            f"{name:>9}: publish -> subscriber p50 {f['p50_ms']} ms  p99 {f['p99_ms']} ms  "
            f"burst {f['burst_per_s']}/s"
        )
    for name, r in figures["recovery"].items():
        print(
            f"{name:>29}: noticed after {r['noticed_s']} s; after healing connected in {r['connected_s']} s, "
            f"delivering in {r['delivering_s']} s"
        )
    print(f"results: {write_result('bus', figures)}")


if __name__ == "__main__":
    main()
