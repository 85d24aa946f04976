"""Task status summaries: reconcile the cached pending action from the one derivation, publish changes.

A summary is a cache. Reconciliation reads the stored summaries first and the derivation second (so
a reconciler can only write a state at least as new as the one it compares against), then writes by
compare-and-set: revision advances only on a semantic change, `fields` is never touched, and a lost
race re-reads and retries a bounded number of times. Every written summary is published whole on
SUMMARY_CHANNEL.

Callers:
- `tasks` / `task` reads (through the API's task loader) use `reconcile`; a task whose repair did
  not converge gets `summary: null` so clients drop their cached one.
- the respond-restore path calls `refresh`, which raises SummaryConvergenceError instead of
  acknowledging convergence it could not confirm.
- the live projector (backend/services/live.py) reconciles the tasks named by session-change
  events in every process; compare-and-set makes the duplicate work harmless.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.bus import BusUnavailable
from backend.domain.errors import CorruptData, SummaryConvergenceError
from backend.domain.pending import task_pending_action
from backend.domain.records import SessionPending, SessionRecord, SummaryRecord
from backend.repository import pending, summaries, tasks
from backend.services.context import Deps

log = logging.getLogger("turnwise.summaries")

SUMMARY_CHANNEL = "turnwise.summary"
FAULT_CAS_CONFLICT = "summary.cas_conflict"
FAULT_PUBLISH = "summary.publish"


@dataclass(frozen=True)
class TaskView:
    """One task's reconciled summary (None: repair failed) and the session projections it came from."""

    summary: SummaryRecord | None
    sessions: list[SessionRecord]
    projections: dict[str, SessionPending]


def summary_event(s: SummaryRecord) -> dict[str, object]:
    return {
        "task_id": s.task_id,
        "revision": s.revision,
        "pending_action": s.pending_action,
        "updated_at": s.updated_at.isoformat(),
    }


async def project_in_transaction(
    conn: AsyncConnection,
    session_ids: Sequence[str],
    *,
    task_of: dict[str, str] | None = None,
    held: Collection[str] = (),
    fault_points: Iterable[str] = (),
) -> tuple[list[SummaryRecord], bool]:
    """Reconcile the existing summaries of these sessions' tasks inside the writer's transaction (a
    unit of work at commit): lock the summary rows, derive, compare-and-set. Returns the summaries
    written and whether every one of those tasks is now provably current (False: a summary not yet
    created, a race or a failure, left to the live projector and readers as before). A constant
    number of statements, whatever the count. `task_of` (session -> task, when the caller knows it
    for every session) spares the lookup; `held` (sessions whose task's summary row the transaction
    has held since it locked them, PostgreSQL) spares the lock."""
    cas_fault = FAULT_CAS_CONFLICT in tuple(fault_points)
    try:
        known = task_of or {}
        if all(s in known for s in session_ids):
            task_ids = sorted({known[s] for s in session_ids})
        else:
            task_ids = await tasks.task_ids_of_sessions(conn, session_ids)
        if not task_ids:
            return [], True
        if held and all(s in held for s in session_ids) and not cas_fault:
            return await _reconcile_held(conn, task_ids)
        stored = await summaries.lock_summaries(conn, task_ids)
        if len(task_ids) == 1 and not cas_fault:
            # One task, its summary row now held: derive and write in one statement whose snapshot
            # follows the lock.
            if task_ids[0] not in stored:
                return [], False
            record = await summaries.reconcile_held(conn, task_ids[0])
            return ([] if record is None else [record]), True
        pairs = await pending.sessions_with_pending(conn, task_ids)
    except CorruptData:
        log.exception("summary projection failed", extra={"event": "summary.project_failed"})
        return [], False
    by_task: dict[str, list[SessionPending]] = {t: [] for t in task_ids}
    for session, projection in pairs:
        by_task[session.task_id].append(projection)
    changes: dict[str, tuple[int, str | None]] = {}
    for task_id, summary in stored.items():
        derived = task_pending_action(by_task[task_id])
        if summary.pending_action != derived:
            changes[task_id] = (summary.revision, derived)
    if cas_fault and changes:
        await summaries.bump_revisions(conn, list(changes))
    written = await summaries.compare_and_set(conn, changes)
    current = len(stored) == len(task_ids) and all(t in written for t in changes)
    return list(written.values()), current


async def _reconcile_held(conn: AsyncConnection, task_ids: Sequence[str]) -> tuple[list[SummaryRecord], bool]:
    """Reconcile summary rows this transaction holds without having read them (PostgreSQL), one
    statement per task. A task without a summary yet is left to readers and the live projector (not
    current)."""
    written: list[SummaryRecord] = []
    current = True
    for task_id in task_ids:
        record, present = await summaries.reconcile_held_if_present(conn, task_id)
        if record is not None:
            written.append(record)
        current = current and present
    return written, current


@dataclass
class Summaries:
    deps: Deps
    attempts: int = 3
    backoff_seconds: tuple[float, ...] = field(default=(0.005, 0.02))

    async def refresh(self, task_ids: Iterable[str]) -> dict[str, SummaryRecord]:
        """Reconcile and publish; raise unless every existing task's summary durably converged."""
        views = await self.reconcile(task_ids)
        failed = [t for t, v in views.items() if v.summary is None]
        if failed:
            raise SummaryConvergenceError(failed)
        return {t: v.summary for t, v in views.items() if v.summary is not None}

    async def reconcile(self, task_ids: Iterable[str]) -> dict[str, TaskView]:
        """Views of the existing tasks among `task_ids` (unknown ids are left out).

        A constant number of statements per attempt, whatever the number of tasks.
        """
        remaining = list(dict.fromkeys(task_ids))
        out: dict[str, TaskView] = {}
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff_seconds[min(attempt - 1, len(self.backoff_seconds) - 1)])
            lost = await self._attempt(remaining, out)
            if not lost:
                return out
            remaining = lost
        for task_id in remaining:
            log.warning("summary repair failed", extra={"event": "summary.repair_failed", "task_id": task_id})
            view = out[task_id]
            out[task_id] = TaskView(None, view.sessions, view.projections)
        return out

    async def _attempt(self, task_ids: Sequence[str], out: dict[str, TaskView]) -> list[str]:
        """One read-compare-write round; returns the tasks whose write lost a race."""
        async with self.deps.db.read() as conn:
            stored = await summaries.read_summaries(conn, task_ids)
            # A stored summary proves its task exists (the foreign key cascades); look up only the rest.
            unknown = [t for t in task_ids if t not in stored]
            existing = (
                set(stored) | {t.id for t in await tasks.list_tasks(conn, unknown)}
                if unknown
                else set(stored)
            )
            pairs = await pending.sessions_with_pending(conn, [t for t in task_ids if t in existing])
        sessions = [s for s, _ in pairs]
        projections = {s.id: p for s, p in pairs}
        by_task: dict[str, list[SessionRecord]] = {t: [] for t in existing}
        for s in sessions:
            by_task[s.task_id].append(s)
        missing: dict[str, str | None] = {}
        changes: dict[str, tuple[int, str | None]] = {}
        for task_id in task_ids:
            if task_id not in existing:
                continue
            session_projections = {s.id: projections[s.id] for s in by_task[task_id] if s.id in projections}
            derived = task_pending_action(session_projections.values())
            held = stored.get(task_id)
            out[task_id] = TaskView(held, by_task[task_id], session_projections)
            if held is None:
                missing[task_id] = derived
            elif held.pending_action != derived:
                changes[task_id] = (held.revision, derived)
        if not missing and not changes:
            return []
        async with self.deps.db.write() as conn:
            if FAULT_CAS_CONFLICT in self.deps.settings.fault_points and changes:
                await summaries.bump_revisions(conn, list(changes))
            written = await summaries.insert_missing(conn, missing)
            written.update(await summaries.compare_and_set(conn, changes))
        for task_id, summary in written.items():
            view = out[task_id]
            out[task_id] = TaskView(summary, view.sessions, view.projections)
            if task_id in changes:
                log.info(
                    "summary repaired",
                    extra={
                        "event": "summary.repaired",
                        "task_id": task_id,
                        "revision": summary.revision,
                        "pending_action": summary.pending_action,
                    },
                )
        await self._publish(written.values())
        return [t for t in (*missing, *changes) if t not in written]

    async def _publish(self, written: Iterable[SummaryRecord]) -> None:
        await publish_summaries(self.deps, written)


async def publish_summaries(deps: Deps, written: Iterable[SummaryRecord]) -> None:
    # The write is committed: a failed publication is logged and clients converge on their next read.
    for summary in written:
        try:
            if FAULT_PUBLISH in deps.settings.fault_points:
                raise RuntimeError(f"injected fault at {FAULT_PUBLISH}")
            await deps.bus.publish(SUMMARY_CHANNEL, summary_event(summary))
        except BusUnavailable:
            # The bus is reconnecting; subscribers get a fresh snapshot once it is back.
            log.warning(
                "summary not published: bus unavailable",
                extra={"event": "summary.publish_failed", "task_id": summary.task_id},
            )
        except Exception:
            log.exception(
                "summary publication failed",
                extra={"event": "summary.publish_failed", "task_id": summary.task_id},
            )
