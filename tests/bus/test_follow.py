"""`EventBus.follow`, the one way a service listens for as long as it runs: the bus makes a failed
subscription again and tells its handler of the gap, and a handler that fails on one message still
gets the next. The `bus.follow` fault point fails every subscription while it is configured."""

from __future__ import annotations

import logging
from typing import Any

from backend.background import stop_tasks
from backend.bus import BUS_GAP, EventBus
from tests.bus.support import eventually
from tests.resume.support import faulty

log = logging.getLogger(__name__)


async def _value(value: Any) -> Any:
    return value


async def test_a_failed_subscription_is_made_again_by_the_bus_and_its_handler_hears_of_the_gap() -> None:
    bus = EventBus("memory://", backoff=(0.05, 0.2))
    await bus.connect()
    got: list[dict[str, Any]] = []
    async with faulty("bus.follow"):
        following = await bus.follow("t.follow", got.append, after_gap={"type": BUS_GAP})
    try:
        assert bus.channel_count == 0  # the first subscription failed; following goes on
        await bus.publish("t.follow", {"n": "missed"})
        await eventually(lambda: _value(bus.channel_count == 1), what="subscribed again")
        await bus.publish("t.follow", {"n": 1})
        await eventually(lambda: _value({"n": 1} in got), what="a message after the gap")
        assert got == [{"type": BUS_GAP}, {"n": 1}]
    finally:
        await stop_tasks([following], log, "test follower")
        await bus.disconnect()


async def test_a_handler_that_fails_on_one_message_gets_the_next_without_a_gap() -> None:
    bus = EventBus("memory://")
    await bus.connect()
    got: list[dict[str, Any]] = []

    async def handle(event: dict[str, Any]) -> None:
        if event.get("n") == "bad":
            raise ValueError("this handler cannot take it")
        got.append(event)

    following = await bus.follow("t.follow", handle, after_gap={"type": BUS_GAP})
    try:
        await bus.publish("t.follow", {"n": "bad"})
        await bus.publish("t.follow", {"n": 2})
        await eventually(lambda: _value(got), what="the next message")
        assert got == [{"n": 2}]
        assert not following.done()
    finally:
        await stop_tasks([following], log, "test follower")
        await bus.disconnect()
