"""Builds and publishes the public events that follow a committed write."""

from __future__ import annotations

import logging

from backend.events import TASK_CHANNEL, BusUnavailable, EventBus, session_channel

log = logging.getLogger("turnwise.events")


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
    try:
        await bus.publish(session_channel(session_id), event)
        await bus.publish(TASK_CHANNEL, event)
    except BusUnavailable:
        # The bus is reconnecting: subscribers get a fresh snapshot once it is back.
        log.warning("event not published: bus unavailable", extra={"event": kind, "session_id": session_id})
        if strict:
            raise
    except Exception:
        log.exception("event publication failed", extra={"event": kind, "session_id": session_id})
        if strict:
            raise
