"""Builds and publishes the public events that follow a committed write."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from backend.bus import TASK_CHANNEL, BusUnavailable, EventBus

log = logging.getLogger("turnwise.events")


def session_change(
    *,
    task_id: str,
    session_id: str,
    kind: str,
    message_id: str | None = None,
    turn_id: str | None = None,
    content_only: bool = False,
    projected: bool = False,
    pending_id: str | None = None,
) -> list[tuple[str, dict[str, object]]]:
    """One change as the message that fans it out on the task channel, which every process hears and
    routes to its own subscribers (session events, waiters, projector, watchdog). `pending_id`: a new
    bundle's id, with its session: a bundle never changes session, so every process that hears it
    can lock that session for a respond without first looking it up."""
    event: dict[str, object] = {
        "type": kind,
        "task_id": task_id,
        "session_id": session_id,
        "message_id": message_id,
        "turn_id": turn_id,
        "content_only": content_only,
    }
    if projected:
        # The writer already brought the task's summary up to date in its own transaction.
        event["projected"] = True
    if pending_id is not None:
        event["pending_id"] = pending_id
    return [(TASK_CHANNEL, event)]


async def publish_batch(
    bus: EventBus, messages: Sequence[tuple[str, dict[str, object]]], *, strict: bool = False
) -> None:
    """Publish several messages in order. By default they are queued on the bus's ordered sender and
    this returns at once (failures are logged there, never raised). `strict` waits until the broker
    took them and raises on failure, for the outbox callers that may clear their durable marker only
    once the bus accepted the event."""
    if not messages:
        return
    kinds = ",".join(sorted({str(e.get("type", channel)) for channel, e in messages}))
    if not strict:
        bus.post_many(messages, kinds)
        return
    try:
        await bus.publish_many(messages)
    except BusUnavailable:
        log.warning("events not published: bus unavailable", extra={"event": kinds})
        raise
    except Exception:
        log.exception("event publication failed", extra={"event": kinds})
        raise


async def publish_session_change(
    bus: EventBus,
    *,
    task_id: str,
    session_id: str,
    kind: str,
    message_id: str | None = None,
    turn_id: str | None = None,
    content_only: bool = False,
    strict: bool = False,
    projected: bool = False,
) -> None:
    """Fan out one change. Publication failures are logged, never raised: the commit already
    happened and clients converge on their next read. `strict` raises instead, for the outbox
    callers that may clear their durable marker only once the bus accepted the event."""
    messages = session_change(
        task_id=task_id,
        session_id=session_id,
        kind=kind,
        message_id=message_id,
        turn_id=turn_id,
        content_only=content_only,
        projected=projected,
    )
    await publish_batch(bus, messages, strict=strict)
