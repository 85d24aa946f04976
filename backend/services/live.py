"""Live fan-out: one bus subscription per channel per process, re-read once, coalesced per subscriber.

Events on the bus carry ids only. The hub drains them in batches, re-reads what its watchers need
(session projections, changed messages) with one batched statement each, and offers the results to
every matching watcher's Mailbox: no watcher reads the database on a change. Watchers are indexed by
the one task (projections) or session (message events) they watch, so a change is offered to the
watchers of its task and to those watching every readable task, not to every watcher of the process.
A Mailbox (`backend/services/mailbox.py`) keeps the newest value per key (session, message, task),
so a slow subscriber receives the latest state instead of an unbounded queue, and an idle watcher
costs two dicts and the future its reader awaits. The hub is also the summary projector: the tasks
named by a batch of session changes are reconciled (compare-and-set, so every process doing it is
harmless).

When the bus comes back after a gap (events were lost), every watcher is sent a fresh snapshot of its
scope: projections and summaries re-read for the union of the watchers' tasks (the mailboxes drop
what is not newer than what a subscriber already has), and to each session-events watcher the
session's messages changed since shortly before the bus was lost, with the current projection.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from backend.background import stop_tasks
from backend.bus import BUS_GAP, TASK_CHANNEL
from backend.domain.events import EventKind
from backend.domain.records import MessageRecord, SessionPending, SummaryRecord
from backend.repository import messages as message_rows
from backend.repository import pending
from backend.services.context import Deps
from backend.services.mailbox import Mailbox
from backend.services.summaries import SUMMARY_CHANNEL, Summaries

log = logging.getLogger("turnwise.live")

T = TypeVar("T")

MESSAGE_EVENTS = {
    EventKind.MESSAGE_ADDED: "added",
    EventKind.MESSAGE_UPDATED: "updated",
    EventKind.MESSAGE_DELETED: "deleted",
}
# After a gap, session-events watchers get the messages changed since this long before the bus was
# found lost (a message's update time can precede its publication: a settled answer keeps the time
# it was given), at most RESYNC_MESSAGES of them per batch of sessions.
RESYNC_MARGIN = dt.timedelta(seconds=120)
RESYNC_MESSAGES = 500


@dataclass(frozen=True)
class SessionChange:
    """One message event as a subscriber sees it: re-read truth, not the event's claim."""

    kind: str  # added | updated | deleted
    session_id: str
    message_id: str
    message: MessageRecord | None
    projection: SessionPending | None


class Registration(Generic[T]):
    """A watcher registered for the length of a `with` block (its mailbox is what `as` binds): in
    `members`, and in `index[key]` (a set made on first use, dropped once empty) when indexed. A class,
    not a generator: a subscription holds it for as long as it runs."""

    __slots__ = ("index", "key", "members", "watcher")

    def __init__(
        self,
        watcher: Watcher[T],
        members: set[Watcher[T]],
        index: dict[str | None, set[Watcher[T]]] | None = None,
        key: str | None = None,
    ) -> None:
        self.watcher = watcher
        self.members = members
        self.index = index
        self.key = key

    def __enter__(self) -> Mailbox[T]:
        self.members.add(self.watcher)
        if self.index is not None:
            self.index.setdefault(self.key, set()).add(self.watcher)
        return self.watcher.mailbox

    def __exit__(self, *_exc: object) -> None:
        self.members.discard(self.watcher)
        if self.index is not None:
            group = self.index.get(self.key)
            if group is not None:
                group.discard(self.watcher)
                if not group:
                    del self.index[self.key]


Scope = Callable[[str, str], bool]  # (task_id, session_id) -> whether a watcher wants it


# The tasks a watcher's scope covers, re-read when it needs a fresh snapshot.
ScopeTasks = Callable[[], Awaitable[Sequence[str]]]


@dataclass(eq=False, slots=True)
class Watcher(Generic[T]):
    scope: Callable[..., bool]
    mailbox: Mailbox[T]
    tasks: ScopeTasks | None = None
    session_id: str | None = None
    # The one task a projection watcher's scope can match, when it is known: the hub then offers it
    # only that task's changes, instead of asking every watcher of the process about every change.
    task_id: str | None = None


def projection_order(p: SessionPending) -> tuple[int, int]:
    return p.revision.key()


def summary_order(s: SummaryRecord) -> int:
    return s.revision


@dataclass
class LiveHub:
    deps: Deps
    summaries: Summaries
    projector: bool = True
    _projections: set[Watcher[SessionPending]] = field(default_factory=set)
    # The same watchers by the one task they watch (None: those watching every readable task).
    _projections_by_task: dict[str | None, set[Watcher[SessionPending]]] = field(default_factory=dict)
    _session_events: set[Watcher[SessionChange]] = field(default_factory=set)
    _session_events_by_session: dict[str | None, set[Watcher[SessionChange]]] = field(default_factory=dict)
    _summaries: set[Watcher[SummaryRecord]] = field(default_factory=set)
    _raw: list[dict[str, Any]] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _gap: bool = False
    resyncs: int = 0
    # Told (pending id, session) of every bundle a process announces (`session_change`).
    bundle_sessions: list[Callable[[str, str], None]] = field(default_factory=list)

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._work()))
        for channel, handler in ((TASK_CHANNEL, self._on_session), (SUMMARY_CHANNEL, self._on_summary)):
            self._tasks.append(await self.deps.bus.follow(channel, handler, after_gap={"type": BUS_GAP}))

    async def stop(self) -> None:
        await stop_tasks(self._tasks, log, "live hub task")
        self._tasks.clear()
        for watchers in (self._projections, self._session_events, self._summaries):
            for w in watchers:
                w.mailbox.close()

    @property
    def watcher_count(self) -> int:
        return len(self._projections) + len(self._session_events) + len(self._summaries)

    # --- registration -------------------------------------------------------------------------

    def watch_projections(
        self, scope: Scope, tasks: ScopeTasks | None = None, *, task_id: str | None = None
    ) -> Registration[SessionPending]:
        """`with hub.watch_projections(...) as mailbox`: the projections `scope` wants. `task_id`: the
        one task it can want (its session's, or the task watched), so only that task's changes are
        offered to it; None for a scope of every readable task."""
        w: Watcher[SessionPending] = Watcher(scope, Mailbox(projection_order), tasks, task_id=task_id)
        return Registration(w, self._projections, self._projections_by_task, task_id)

    def _projection_watchers(self, task_id: str) -> list[Watcher[SessionPending]]:
        by_task = self._projections_by_task
        return [*by_task.get(task_id, ()), *by_task.get(None, ())]

    def watch_session_events(self, session_id: str) -> Registration[SessionChange]:
        w: Watcher[SessionChange] = Watcher(lambda _t, s: s == session_id, Mailbox(), session_id=session_id)
        return Registration(w, self._session_events, self._session_events_by_session, session_id)

    def watch_summaries(
        self, scope: Callable[[str], bool], tasks: ScopeTasks | None = None
    ) -> Registration[SummaryRecord]:
        return Registration(Watcher(scope, Mailbox(summary_order), tasks), self._summaries)

    def offer_summary(self, summary: SummaryRecord) -> None:
        for w in list(self._summaries):
            if w.scope(summary.task_id):
                w.mailbox.offer(summary.task_id, summary)

    # --- bus ----------------------------------------------------------------------------------

    def _on_session(self, event: dict[str, Any]) -> None:
        if event.get("type") == BUS_GAP:
            self._gap = True
        else:
            self._raw.append(event)
            pending_id, session_id = event.get("pending_id"), event.get("session_id")
            if isinstance(pending_id, str) and isinstance(session_id, str):
                for told in self.bundle_sessions:
                    told(pending_id, session_id)
        self._wake.set()

    def _on_summary(self, event: dict[str, Any]) -> None:
        if event.get("type") == BUS_GAP:
            return  # the session channel's gap marker resyncs summaries too
        try:
            summary = _summary_from_event(event)
        except (KeyError, TypeError, ValueError):
            log.warning("malformed summary event", extra={"event": "live.bad_event"})
            return
        self.offer_summary(summary)

    # --- worker -------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._raw = self._raw, []
            if self._gap:
                self._gap = False
                try:
                    await self.resync()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("live resync failed", extra={"event": "live.resync_failed"})
            try:
                await self._deliver(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("live delivery failed", extra={"event": "live.delivery_failed"})
            if self.projector:
                await self._project(batch)

    async def _deliver(self, batch: list[dict[str, Any]]) -> None:
        touched: dict[str, str] = {}  # session -> task
        changed_messages: list[dict[str, Any]] = []
        for event in batch:
            session_id, task_id = event.get("session_id"), event.get("task_id")
            if not isinstance(session_id, str) or not isinstance(task_id, str):
                continue
            touched[session_id] = task_id
            if event.get("type") in MESSAGE_EVENTS and isinstance(event.get("message_id"), str):
                changed_messages.append(event)
        wanted = {
            s
            for s, t in touched.items()
            if any(w.scope(t, s) for w in self._projection_watchers(t))
            or any(w.scope(t, s) for w in self._session_events_by_session.get(s, ()))
        }
        if not wanted:
            return
        message_ids = [e["message_id"] for e in changed_messages if e["session_id"] in wanted]
        projections: dict[str, SessionPending] = {}
        found: dict[str, MessageRecord] = {}
        try:
            async with self.deps.db.read() as conn:
                projections = await pending.pending_for_sessions(conn, sorted(wanted))
                if message_ids:
                    found = await message_rows.get_messages(conn, message_ids)
        except Exception:
            # Projection could not be computed: message subscribers still hear of the change with
            # projection null (keep the old one) as soon as the messages themselves can be read.
            log.exception("live re-read failed", extra={"event": "live.reread_failed"})
            if message_ids:
                async with self.deps.db.read() as conn:
                    found = await message_rows.get_messages(conn, message_ids)
        # One re-read per batch, one value per change: every interested watcher is offered the same
        # record (the API's subscriptions turn it into one shared result, `backend/api/fanout.py`).
        for p in projections.values():
            rank = projection_order(p)
            for pw in self._projection_watchers(p.task_id):
                if pw.scope(p.task_id, p.session_id):
                    pw.mailbox.offer(p.session_id, p, rank)
        for event in changed_messages:
            session_id, message_id = event["session_id"], event["message_id"]
            if session_id not in wanted:
                continue
            message = found.get(message_id)
            kind = MESSAGE_EVENTS[event["type"]] if message is not None else "deleted"
            projection = None if event.get("content_only") else projections.get(session_id)
            change = SessionChange(kind, session_id, message_id, message, projection)
            for sw in list(self._session_events_by_session.get(session_id, ())):
                if sw.scope(event["task_id"], session_id):
                    sw.mailbox.offer(message_id, change)

    async def resync(self) -> None:
        """Send every watcher a fresh snapshot of its scope (after the bus lost events)."""
        self.resyncs += 1
        projection_watchers = [w for w in self._projections if w.tasks is not None]
        summary_watchers = [w for w in self._summaries if w.tasks is not None]
        event_watchers = [w for w in self._session_events if w.session_id is not None]
        scopes: dict[int, Sequence[str]] = {}
        for tasks_of in [(id(w), w.tasks) for w in projection_watchers] + [
            (id(w), w.tasks) for w in summary_watchers
        ]:
            if tasks_of[1] is not None:
                scopes[tasks_of[0]] = await tasks_of[1]()
        projection_tasks = sorted({t for w in projection_watchers for t in scopes[id(w)]})
        summary_tasks = sorted({t for w in summary_watchers for t in scopes[id(w)]})
        event_sessions = sorted({w.session_id for w in event_watchers if w.session_id is not None})
        lost_at = self.deps.bus.lost_at
        since = (lost_at or dt.datetime.now(dt.UTC)) - RESYNC_MARGIN
        async with self.deps.db.read() as conn:
            pairs = await pending.sessions_with_pending(conn, projection_tasks)
            projections = await pending.pending_for_sessions(conn, event_sessions)
            changed = await message_rows.changed_since(conn, event_sessions, since, limit=RESYNC_MESSAGES)
        for s, p in pairs:
            for pw in projection_watchers:
                if s.task_id in scopes[id(pw)] and pw.scope(s.task_id, s.id):
                    pw.mailbox.offer(s.id, p)
        for message in changed:
            change = SessionChange(
                "updated", message.session_id, message.id, message, projections.get(message.session_id)
            )
            for sw in event_watchers:
                if sw.session_id == message.session_id:
                    sw.mailbox.offer(message.id, change)
        if summary_tasks:
            views = await self.summaries.reconcile(summary_tasks)
            for task_id, view in views.items():
                if view.summary is None:
                    continue
                for mw in summary_watchers:
                    if task_id in scopes[id(mw)] and mw.scope(task_id):
                        mw.mailbox.offer(task_id, view.summary)
        log.info(
            "live subscribers resynced",
            extra={
                "event": "live.resynced",
                "projection_watchers": len(projection_watchers),
                "summary_watchers": len(summary_watchers),
                "event_watchers": len(event_watchers),
                "messages": len(changed),
            },
        )

    async def _project(self, batch: list[dict[str, Any]]) -> None:
        # Tasks whose writer already reconciled the summary in its own transaction are skipped.
        task_ids = sorted(
            {e["task_id"] for e in batch if isinstance(e.get("task_id"), str) and not e.get("projected")}
        )
        if not task_ids:
            return
        try:
            await self.summaries.reconcile(task_ids)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("summary projection failed", extra={"event": "summary.project_failed"})


def _summary_from_event(event: dict[str, Any]) -> SummaryRecord:
    revision = event["revision"]
    if not isinstance(revision, int):
        raise TypeError("revision")
    return SummaryRecord(
        str(event["task_id"]),
        revision,
        event.get("pending_action"),
        {},
        dt.datetime.fromisoformat(str(event["updated_at"])),
    )
