"""Startup recovery of prompt reservations (step 1) and replay of the start-event outbox (step 3).

Step 1, per page of reservations, in one write transaction and a constant number of statements:
an unattempted reservation without message evidence never reached the agent, so it is deleted and
exactly its claimed rows are restored (only those still carrying their claim's intent, only while
their turn is current in a live session); an attempted or message-backed one may be running, so it
is kept, its claim's intent retired, its recovery metadata replaced by the start-event outbox marker.
Malformed recovery metadata (partial identity, non-string or empty ids, rows that do not match)
keeps the rows untouched for diagnosis and fails startup after every other reservation was handled.

Step 3 publishes `turn.started` (then `turn.completed` for completed turns) for outbox turns and
clears each marker only once the bus accepted its events; a failure fails startup and keeps it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from backend import faults
from backend.domain.clarification import flag
from backend.domain.events import EventKind
from backend.domain.lifecycle import CLAIM_KEY, BundleRow
from backend.repository import recovery as recovery_repo
from backend.repository import reservations
from backend.repository.reservations import StoredReservation
from backend.services.context import Deps
from backend.services.orchestrator import Orchestrator
from backend.services.uow import uow

log = logging.getLogger("turnwise.recovery")

PAGE = 1000


class ReservationRecoveryError(RuntimeError):
    """Some reservations could not be reconciled; they were kept as they are."""


@dataclass
class RecoveryReport:
    deleted: list[str] = field(default_factory=list)
    preserved: list[str] = field(default_factory=list)
    restored_messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def claim_identity(r: StoredReservation) -> tuple[str, str, list[str]]:
    """(source turn, pending id, claimed message ids) or ValueError naming what is malformed."""
    md = r.metadata
    turn_id = md.get(reservations.SOURCE_TURN_ID)
    pending_id = md.get(reservations.SOURCE_PENDING_ID)
    ids = md.get(reservations.SOURCE_MESSAGE_IDS)
    if not isinstance(turn_id, str) or not turn_id:
        raise ValueError(f"{reservations.SOURCE_TURN_ID} is missing or not a non-empty string")
    if not isinstance(pending_id, str) or not pending_id:
        raise ValueError(f"{reservations.SOURCE_PENDING_ID} is missing or not a non-empty string")
    if not isinstance(ids, list) or not ids:
        raise ValueError(f"{reservations.SOURCE_MESSAGE_IDS} is missing or not a non-empty list")
    if not all(isinstance(i, str) and i for i in ids):
        raise ValueError(f"{reservations.SOURCE_MESSAGE_IDS} holds a non-string or empty id")
    return turn_id, pending_id, list(ids)


class ReservationRecovery:
    def __init__(self, deps: Deps, orchestrator: Orchestrator) -> None:
        self.deps = deps
        self.orchestrator = orchestrator
        # Claims (and bundles) of reservations kept by the last run: their rows stay as they are.
        self._kept_claims: set[str] = set()
        self._kept_bundles: set[str] = set()
        # Tasks whose rows or turns recovery changed (their summaries are refreshed before serving).
        self.touched_tasks: set[str] = set()

    def owns(self, row: BundleRow) -> bool:
        """Does a reservation kept for diagnosis own this intent row? (intent recovery skips it)"""
        claim = row.metadata.get(CLAIM_KEY)
        pending = row.metadata.get("pending_id")
        return (isinstance(claim, str) and claim in self._kept_claims) or (
            isinstance(pending, str) and pending in self._kept_bundles
        )

    def _keep(self, r: StoredReservation) -> None:
        claim = r.metadata.get(reservations.CLAIM_ID)
        pending = r.metadata.get(reservations.SOURCE_PENDING_ID)
        if isinstance(claim, str) and claim:
            self._kept_claims.add(claim)
        if isinstance(pending, str) and pending:
            self._kept_bundles.add(pending)

    async def recover_reservations(self) -> RecoveryReport:
        report = RecoveryReport()
        self._kept_claims.clear()
        self._kept_bundles.clear()
        self.touched_tasks.clear()
        after = ""
        while True:
            page_end = await self._page(after, report)
            if page_end is None:
                break
            after = page_end
        await faults.hit("recovery.after_reservations")
        if report.errors:
            raise ReservationRecoveryError("; ".join(report.errors))
        return report

    async def _page(self, after: str, report: RecoveryReport) -> str | None:
        """One page of stored reservations: the empty ones deleted (their claims restored), the
        ambiguous ones preserved for the outbox; a malformed or mismatched one kept and reported."""
        async with uow(self.deps) as w:
            conn = w.conn
            page = await reservations.stored_reservations(conn, after=after, limit=PAGE)
            if not page:
                return None
            checked = await self._matching(conn, self._well_formed(page, report), report)
            await w.lock({r.session_id for r, _ in checked})
            attempted = {
                r.id for r, _ in checked if flag(r.metadata.get(reservations.ATTEMPTED)) or r.has_evidence
            }
            # Empty and unattempted: the prompt was never sent. The WHERE re-checks that.
            empty = [r.id for r, _ in checked if r.id not in attempted]
            deleted = set(await reservations.delete_empty(conn, empty))
            restore_ids = [i for r, ids in checked if r.id in deleted for i in ids]
            restored = await recovery_repo.restore_intents(conn, restore_ids)
            # Attempted or message-backed: maybe running. Keep it, retire the claim, queue the start event.
            moved = set(
                await reservations.move_to_outbox(conn, [r.id for r, _ in checked if r.id in attempted])
            )
            await recovery_repo.retire_intents(conn, [i for r, ids in checked if r.id in moved for i in ids])
            w.touch(*(r.session_id for r, _ in checked if r.id in deleted or r.id in moved))
            task_of = {r.session_id: r.task_id for r in page}
            for message_id, session_id in restored:
                w.publish(task_of[session_id], session_id, EventKind.MESSAGE_UPDATED, message_id=message_id)
        self._report_page(report, checked, deleted, moved, restored)
        self.touched_tasks.update(task_of[s] for _, s in restored)
        self.touched_tasks.update(r.task_id for r, _ in checked if r.id in deleted or r.id in moved)
        return page[-1].id

    def _well_formed(
        self, page: Sequence[StoredReservation], report: RecoveryReport
    ) -> list[tuple[StoredReservation, list[str]]]:
        """The reservations whose claim can be read, with their claimed row ids; the rest kept."""
        valid: list[tuple[StoredReservation, list[str]]] = []
        for r in page:
            try:
                _, _, ids = claim_identity(r)
                valid.append((r, ids))
            except ValueError as exc:
                self._keep(r)
                report.errors.append(f"reservation {r.id}: {exc}")
                log.error(
                    "reservation kept: malformed recovery metadata",
                    extra={"event": "recovery.reservation_malformed", "turn_id": r.id, "why": str(exc)},
                )
        return valid

    async def _matching(
        self,
        conn: AsyncConnection,
        valid: list[tuple[StoredReservation, list[str]]],
        report: RecoveryReport,
    ) -> list[tuple[StoredReservation, list[str]]]:
        """The reservations whose claimed rows still belong to their claim; the rest kept."""
        facts = await reservations.claimed_row_facts(conn, [i for _, ids in valid for i in ids])
        checked: list[tuple[StoredReservation, list[str]]] = []
        for r, ids in valid:
            turn_id, pending_id, _ = claim_identity(r)
            wrong = [i for i in ids if i in facts and facts[i] != (r.session_id, turn_id, pending_id)]
            if wrong:
                self._keep(r)
                report.errors.append(
                    f"reservation {r.id}: claimed rows {', '.join(wrong)} do not match its claim"
                )
                log.error(
                    "reservation kept: claimed rows do not match",
                    extra={"event": "recovery.reservation_mismatch", "turn_id": r.id},
                )
                continue
            checked.append((r, ids))
        return checked

    @staticmethod
    def _report_page(
        report: RecoveryReport,
        checked: list[tuple[StoredReservation, list[str]]],
        deleted: set[str],
        moved: set[str],
        restored: Sequence[tuple[str, str]],
    ) -> None:
        for r, _ in checked:
            if r.id in deleted:
                report.deleted.append(r.id)
                log.info(
                    "empty reservation deleted",
                    extra={"event": "recovery.reservation_deleted", "turn_id": r.id},
                )
            elif r.id in moved:
                report.preserved.append(r.id)
                log.info(
                    "ambiguous reservation preserved",
                    extra={
                        "event": "recovery.reservation_preserved",
                        "turn_id": r.id,
                        "session_id": r.session_id,
                    },
                )
        for message_id, _ in restored:
            report.restored_messages.append(message_id)
            log.info(
                "claimed row restored", extra={"event": "recovery.claim_restored", "message_id": message_id}
            )

    async def replay_outbox(self) -> int:
        """Step 3: ordered start (and completion) events for every outbox turn, page by page."""
        replayed = 0
        errors: list[str] = []
        after = ""
        while True:
            async with self.deps.db.read() as conn:
                page = await reservations.outbox(conn, after=after, limit=PAGE)
            if not page:
                break
            after = page[-1].id
            self.touched_tasks.update(t.task_id for t in page)
            try:
                replayed += len(
                    await self.orchestrator.replay_start(
                        [(t.id, t.session_id, t.task_id, t.completed) for t in page]
                    )
                )
            except Exception as exc:  # noqa: BLE001 - every page is tried; the errors fail startup below
                errors.append(str(exc))
        if errors:
            raise ReservationRecoveryError("; ".join(errors))
        return replayed
