"""Server startup and shutdown, in one visible order: recover everything durable, then go live.

1. prompt reservations        (`ReservationRecovery.recover_reservations`)
2. response-delivery intents  (`Recovery.recover_delivery_intents`), then orphaned waiters
   then the inbox (`Inbox.recover`: leases of gone processes, items a newer turn superseded)
3. start-event outbox replay  (`ReservationRecovery.replay_outbox`)
4. summaries of the tasks recovery touched (nothing listened to its events yet)
5. the live hub: bus subscriber and summary projector; the needs-you hub (open inboxes)
6. the waiter hub (hand-offs between processes, heartbeat)
7. the token cache's listener (revocations and grant changes of every process)
8. the primary-answer watchdogs
Prompt admission and `/readyz` 200 follow only once `start` returned: the server binds its port
after the lifespan startup completed.

Nothing subscribes to the bus before step 5, so a failing recovery step leaves no subscriber, no
watcher and no listener behind. Every step is attempted in order; the first failure stops startup
with `StartupFailed` naming the step and the reason (recovery itself still finishes steps 1 and 2
before it reports, as the recovery order requires).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from backend.services.container import Services

log = logging.getLogger("turnwise.startup")


class StartupFailed(RuntimeError):
    """A startup step failed; the server must not serve. The message names the step and why."""

    def __init__(self, step: str, reason: BaseException) -> None:
        super().__init__(f"startup step {step!r} failed: {reason}")


async def start(services: Services, *, then: Callable[[Services], Awaitable[None]] | None = None) -> None:
    """Run the startup sequence; `then` runs last, before readiness (the demo's seed data)."""
    touched: set[str] = set()

    async def recover() -> None:
        touched.update(await services.recovery.run())

    async def inbox() -> None:
        await services.inbox.recover()

    async def replay() -> None:
        await services.resume_recovery.replay_outbox()
        touched.update(services.resume_recovery.touched_tasks)

    async def summaries() -> None:
        if touched:
            await services.summaries.refresh(sorted(touched))

    steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("reservations and delivery intents", recover),
        ("inbox", inbox),
        ("outbox replay", replay),
        ("summaries", summaries),
        ("live hub", services.live.start),
        ("needs-you hub", services.needs_you_live.start),
        ("waiter hub", services.waiters.start),
        ("token cache", services.access.start),
        ("watchdogs", services.watchdogs.start),
        ("notification worker", services.reach.start),
    ]
    if then is not None:
        after = then

        async def last() -> None:
            await after(services)

        steps.append(("after start", last))
    for name, step in steps:
        log.debug("startup: %s", name, extra={"event": "startup.step", "step": name})
        try:
            await step()
        except Exception as exc:
            log.exception("startup failed", extra={"event": "startup.failed", "step": name})
            await stop(services)
            raise StartupFailed(name, exc) from exc


async def stop(services: Services) -> None:
    """Stop what `start` started, newest first; each stop tolerates never having been started."""
    for name, step in (
        ("notification worker", services.reach.stop),
        ("watchdogs", services.watchdogs.stop),
        ("claim restorer", services.pending.restorer.stop),
        ("token cache", services.access.stop),
        ("waiter hub", services.waiters.stop),
        ("needs-you hub", services.needs_you_live.stop),
        ("live hub", services.live.stop),
    ):
        try:
            await step()
        except Exception:
            log.exception("shutdown step failed", extra={"event": "shutdown.failed", "step": name})
