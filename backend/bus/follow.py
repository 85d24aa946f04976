"""A service's subscription for as long as it runs: the bus resubscribes it, and its handler hears
of every gap, so no service loops over `subscribe` itself."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from backend import faults

if TYPE_CHECKING:
    from backend.bus.core import EventBus

log = logging.getLogger("turnwise.events")

# What a followed channel hands each message to (a coroutine function, or a plain one).
Handler = Callable[[dict[str, Any]], Awaitable[None] | None]


async def follow(
    bus: EventBus, channel: str, handle: Handler, *, after_gap: dict[str, Any] | None = None
) -> asyncio.Task[None]:
    """Follow `channel` for as long as the returned task runs (the caller cancels it): `handle`
    gets every message, and the `after_gap` marker after every gap, whether the bus reconnected or
    this subscription failed and was made again (with the bus's backoff). A handler that raises is
    logged and the next message handled. Returns once the first subscription was made or failed (it
    is retried), so a service starts whether or not the bus is up."""
    first = asyncio.Event()
    task = asyncio.create_task(_follow(bus, channel, handle, after_gap, first), name=f"bus {channel}")
    first_done = asyncio.ensure_future(first.wait())
    try:
        await asyncio.wait([first_done, task], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        first_done.cancel()
    return task


async def _follow(
    bus: EventBus, channel: str, handle: Handler, after_gap: dict[str, Any] | None, first: asyncio.Event
) -> None:
    delay, missed = bus.backoff[0], False
    while True:
        try:
            faults.check("bus.follow")  # lets a test fail every subscription until it lifts the point
            async with bus.subscribe(channel, after_gap=after_gap) as events:
                first.set()
                delay = bus.backoff[0]
                if missed and after_gap is not None:
                    # Whatever was published while this was not subscribed never arrived.
                    await _handle(channel, handle, dict(after_gap))
                async for event in events:
                    await _handle(channel, handle, event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "bus subscription failed; resubscribing",
                extra={"event": "bus.resubscribe", "channel": channel},
            )
        first.set()
        missed = True
        await asyncio.sleep(delay)
        delay = min(delay * 2, bus.backoff[1])


async def _handle(channel: str, handle: Handler, event: dict[str, Any]) -> None:
    try:
        result = handle(event)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("bus message handler failed", extra={"event": "bus.handler_failed", "channel": channel})
