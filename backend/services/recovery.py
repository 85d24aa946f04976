"""Startup recovery of clarification claims and waiters, before the server admits traffic.

Order (spec "Recovery order at startup"): prompt reservations first (`ReservationRecovery`), then
response-delivery intents, then waiters whose process is gone. Intent recovery still runs when
reservation recovery failed; any error fails startup afterwards. `backend/services/startup.py` runs
this before anything listens to the bus.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from backend.db.engine import utcnow
from backend.domain.errors import CorruptData
from backend.domain.events import EventKind
from backend.repository import instances, tasks
from backend.repository import recovery as recovery_repo
from backend.services.context import Deps
from backend.services.resume_recovery import ReservationRecovery, ReservationRecoveryError
from backend.services.uow import uow
from backend.services.waiters import WaiterHub

log = logging.getLogger("turnwise.recovery")


class RecoveryFailed(RuntimeError):
    """Startup must stop: some claim could not be reconciled (the next start retries)."""


@dataclass
class Recovery:
    deps: Deps
    hub: WaiterHub
    # Step 1. Rows whose claim belongs to a reservation it kept (malformed, kept for diagnosis) are
    # owned by that reservation, so intent recovery leaves them exactly as they are.
    reservations: ReservationRecovery
    # Tasks whose rows recovery changed: their summaries are refreshed before the server goes live.
    touched_tasks: set[str] = field(default_factory=set)

    async def run(self) -> set[str]:
        """Reservations, delivery intents, orphaned waiters; returns the ids of the tasks touched."""
        errors: list[str] = []
        self.touched_tasks.clear()
        try:
            await self.reservations.recover_reservations()
        except ReservationRecoveryError as exc:
            log.exception("reservation recovery failed", extra={"event": "recovery.reservations_failed"})
            errors.append(f"reservation recovery: {exc}")
        await self.recover_delivery_intents()
        await self.detach_orphaned_waiters()
        touched = self.touched_tasks | self.reservations.touched_tasks
        if errors:
            raise RecoveryFailed("; ".join(errors))
        return touched

    async def recover_delivery_intents(self) -> tuple[int, int]:
        """Restore unconfirmed claims whose turn is current in a live session; retire the rest.

        One transaction and a constant number of statements, however many claims are stranded.
        """
        async with uow(self.deps) as w:
            conn = w.conn
            rows = [r for r in await recovery_repo.delivery_intents(conn) if not self.reservations.owns(r)]
            if not rows:
                return (0, 0)
            pending = [r.id for r in rows if r.is_pending]
            if pending:
                raise CorruptData(f"delivery intent on pending rows {', '.join(sorted(pending))}")
            await w.lock({r.session_id for r in rows})
            ids = [r.id for r in rows]
            restored = await recovery_repo.restore_intents(conn, ids)
            done = {m for m, _ in restored}
            retired = await recovery_repo.retire_intents(conn, [i for i in ids if i not in done])
            w.touch(*(s for _, s in restored))
            task_of = {
                s.id: s.task_id for s in await tasks.sessions_by_id(conn, {r.session_id for r in rows})
            }
            for message_id, session_id in [*restored, *retired]:
                w.publish(task_of[session_id], session_id, EventKind.MESSAGE_UPDATED, message_id=message_id)
        self.touched_tasks.update(task_of.values())
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
            rows = await recovery_repo.attached_waiter_rows(conn)
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
            changed = await recovery_repo.detach_rows(conn, orphaned)
            task_of = {s.id: s.task_id for s in await tasks.sessions_by_id(conn, {s for _, s in changed})}
            for message_id, session_id in changed:
                w.publish(task_of[session_id], session_id, EventKind.MESSAGE_UPDATED, message_id=message_id)
            await instances.prune(conn, now - self.hub.stale_after)
        self.touched_tasks.update(task_of.values())
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
