"""Startup recovery of clarification claims and waiters, before the server admits traffic.

Order (spec "Recovery order at startup"): prompt reservations first (registered by the resume
service through `reservation_steps`), then response-delivery intents, then waiters whose process is
gone. Intent recovery still runs when a reservation step failed; any error fails startup afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from backend.db.engine import utcnow
from backend.domain.errors import CorruptData
from backend.domain.lifecycle import BundleRow
from backend.repository import clarifications as repo
from backend.repository import instances, tasks
from backend.services.context import Deps
from backend.services.uow import uow
from backend.services.waiters import WaiterHub

log = logging.getLogger("turnwise.recovery")


class RecoveryFailed(RuntimeError):
    """Startup must stop: some claim could not be reconciled (the next start retries)."""


@dataclass
class Recovery:
    deps: Deps
    hub: WaiterHub
    # Reservation recovery (next issue) appends here; it runs BEFORE delivery-intent recovery.
    reservation_steps: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Rows whose claim belongs to a reservation that step 1 kept (malformed, kept for diagnosis):
    # that reservation owns them, so intent recovery leaves them exactly as they are.
    owned_by_reservation: Callable[[BundleRow], bool] | None = None

    async def run(self) -> None:
        errors: list[str] = []
        for step in self.reservation_steps:
            try:
                await step()
            except Exception as exc:
                log.exception("reservation recovery failed", extra={"event": "recovery.reservations_failed"})
                errors.append(f"reservation recovery: {exc}")
        await self.recover_delivery_intents()
        await self.detach_orphaned_waiters()
        if errors:
            raise RecoveryFailed("; ".join(errors))

    async def recover_delivery_intents(self) -> tuple[int, int]:
        """Restore unconfirmed claims whose turn is current in a live session; retire the rest.

        One transaction and a constant number of statements, however many claims are stranded.
        """
        async with uow(self.deps) as w:
            conn = w.conn
            rows = await repo.delivery_intents(conn)
            if self.owned_by_reservation is not None:
                rows = [r for r in rows if not self.owned_by_reservation(r)]
            if not rows:
                return (0, 0)
            pending = [r.id for r in rows if r.is_pending]
            if pending:
                raise CorruptData(f"delivery intent on pending rows {', '.join(sorted(pending))}")
            await w.lock({r.session_id for r in rows})
            ids = [r.id for r in rows]
            restored = await repo.restore_intents(conn, ids)
            done = {m for m, _ in restored}
            retired = await repo.retire_intents(conn, [i for i in ids if i not in done])
            w.touch(*(s for _, s in restored))
            task_of = {
                s.id: s.task_id for s in await tasks.sessions_by_id(conn, {r.session_id for r in rows})
            }
            for message_id, session_id in [*restored, *retired]:
                w.publish(task_of[session_id], session_id, "message.updated", message_id=message_id)
        pending_of = {r.id: r.metadata.get("pending_id") for r in rows}
        for action, changed in (("restored", restored), ("retired", retired)):
            for message_id, session_id in changed:
                log.info(
                    f"delivery intent {action}",
                    extra={
                        "event": f"recovery.intent_{action}",
                        "message_id": message_id,
                        "pending_id": pending_of.get(message_id),
                        "session_id": session_id,
                    },
                )
        return (len(restored), len(retired))

    async def detach_orphaned_waiters(self) -> int:
        """Detach bundles still marked attached to a waiter whose process is gone.

        With `memory://` no other process can hold a waiter this one could reach, so every attached
        row left from before this start is orphaned; on a shared bus only instances whose heartbeat
        went stale are.
        """
        async with uow(self.deps) as w:
            conn = w.conn
            rows = await repo.attached_waiter_rows(conn)
            if not rows:
                return 0
            beats = await instances.heartbeats(conn, [i for _, _, i in rows if i])
            now = utcnow()
            orphaned = [
                m
                for m, _, instance in rows
                if instance != self.hub.instance_id
                and (
                    not self.hub.shared_bus
                    or instance not in beats
                    or now - beats[instance] >= self.hub.stale_after
                )
            ]
            await w.lock({s for _, s, _ in rows})
            changed = await repo.detach_rows(conn, orphaned)
            task_of = {s.id: s.task_id for s in await tasks.sessions_by_id(conn, {s for _, s in changed})}
            for message_id, session_id in changed:
                w.publish(task_of[session_id], session_id, "message.updated", message_id=message_id)
            await instances.prune(conn, now - self.hub.stale_after)
        for message_id, session_id in changed:
            log.info(
                "orphaned waiter detached",
                extra={
                    "event": "recovery.waiter_detached",
                    "message_id": message_id,
                    "session_id": session_id,
                },
            )
        return len(changed)
