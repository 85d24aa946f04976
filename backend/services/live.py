"""Live fan-out: one bus subscription per channel per process, re-read once, coalesced per subscriber.

Events on the bus carry ids only. The hub drains them in batches, re-reads what its watchers need
(session projections, changed messages) with one batched statement each, and offers the results to
every matching watcher's Mailbox: no watcher reads the database on a change. Watchers are indexed by
the one task (projections) or session (message events) they watch, so a change is offered to the
watchers of its task and to those watching every readable task, not to every watcher of the process.
A Mailbox keeps the newest value per key (session, message, task), so a slow subscriber receives the
latest state instead of an unbounded queue, and an idle watcher costs two dicts and the future its
reader awaits. The hub is also the summary projector: the tasks named by a batch of session changes
are reconciled (compare-and-set, so every process doing it is harmless).

When the bus comes back after a gap (events were lost), every watcher is sent a fresh snapshot of its
scope: projections and summaries re-read for the union of the watchers' tasks (the mailboxes drop
what is not newer than what a subscriber already has), and to each session-events watcher the
session's messages changed since shortly before the bus was lost, with the current projection.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from backend.background import stop_tasks
from backend.bus import BUS_GAP, TASK_CHANNEL
from backend.domain.events import EventKind
from backend.domain.records import MessageRecord, SessionPending, SummaryRecord
from backend.repository import messages as message_rows
from backend.repository import pending
from backend.services.context import Deps
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


def eagerly(awaitable: Awaitable[Any]) -> asyncio.Future[Any]:
    """Run `awaitable` at once, in the caller's own step, until it first waits for something: a future
    that is already done when it never did (a send into a socket that takes it at once), else the
    task it goes on in from where it waits. One change sent straight to ten thousand subscriptions
    is then ten thousand calls instead of ten thousand tasks, each made and scheduled."""
    loop = asyncio.get_running_loop()
    coro: Any = awaitable.__await__()
    try:
        waits_for = coro.send(None)
    except StopIteration as stop:
        done = loop.create_future()
        done.set_result(stop.value)
        return done
    except asyncio.CancelledError:
        done = loop.create_future()
        done.cancel()
        return done
    except Exception as exc:  # noqa: BLE001 - handed to the caller, as a task would hand it
        done = loop.create_future()
        done.set_exception(exc)
        return done
    resume = _Resume(coro, waits_for)
    task = asyncio.ensure_future(_resumed(resume))
    task.add_done_callback(resume.cancelled_before_start)
    return task


async def _resumed(resume: _Resume) -> Any:
    return await resume


class _Resume:
    """A coroutine that already ran up to its first wait, as an awaitable: the task awaiting it waits
    for what it was waiting for (handed up as the coroutine handed it), then resumes it from there."""

    __slots__ = ("_coro", "_waits_for")

    def __init__(self, coro: Any, waits_for: Any) -> None:
        self._coro = coro
        self._waits_for = waits_for

    def cancelled_before_start(self, task: asyncio.Future[Any]) -> None:
        """A task cancelled before its first step never resumes the coroutine: the cancellation is
        thrown into it here, where it waits, as it would have been."""
        coro, self._coro, self._waits_for = self._coro, None, None
        if coro is None or not task.cancelled():
            return
        try:
            coro.throw(asyncio.CancelledError())
        except BaseException:  # noqa: BLE001 - it ends with the cancellation, as its task did
            pass
        finally:
            coro.close()

    def __await__(self) -> Any:
        coro, waits_for = self._coro, self._waits_for
        self._coro = self._waits_for = None
        while True:
            try:
                sent = yield waits_for
            except BaseException as exc:  # noqa: BLE001 - thrown on into the coroutine (a cancellation)
                try:
                    waits_for = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waits_for = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


# A mailbox's direct sender (see `Mailbox.direct`): given a value, an awaitable that sends it and
# says whether it did, or None when this value cannot be sent so (its reader then gets it).
Direct = Callable[[Any], Awaitable[bool] | None]


class Mailbox(Generic[T]):
    """The newest value per key, delivered oldest key first.

    With `order`, a value is dropped unless it is newer than both the one waiting for the same key and
    the last one delivered for it, so a snapshot racing a change can never step a subscriber back.
    An idle mailbox holds two small dicts and the future its reader awaits (made when it waits).

    `direct` (set by the reader, optional): a value offered while the reader is idle (waiting, with
    nothing held and no direct send under way) is handed to `direct` instead of waking the reader,
    which costs the reader's whole path per value when one change reaches ten thousand mailboxes.
    Order is kept: a direct send starts only when everything the reader took was already delivered
    (it waits again only then), values offered while it runs wait for it, and those it made stale
    are dropped; a value `direct` declines, or failed to send, goes to the reader as usual.
    """

    __slots__ = ("_items", "_order", "_sending", "_sent", "_waiter", "closed", "direct")

    def __init__(self, order: Callable[[T], Any] | None = None) -> None:
        self._order = order
        # key -> (value, its rank under `order`, or None without one)
        self._items: dict[Hashable, tuple[T, Any]] = {}
        self._sent: dict[Hashable, Any] = {}
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.direct: Direct | None = None
        # The direct send under way: (key, value, rank, its task).
        self._sending: tuple[Hashable, T, Any, asyncio.Future[bool]] | None = None

    def offer(self, key: Hashable, value: T, rank: Any = None) -> None:
        """`rank`: the value's rank under `order`, when the caller has it (one change offered to
        many mailboxes is ranked once)."""
        if self._order is not None:
            if rank is None:
                rank = self._order(value)
            held = self._items.get(key)
            if held is not None and rank < held[1]:
                return
            if key in self._sent and rank <= self._sent[key]:
                return
        if self._sending is None:
            direct, waiter = self.direct, self._waiter
            if direct is not None and waiter is not None and not waiter.done() and not self._items:
                try:
                    started = direct(value)
                except Exception:
                    # A defect of the sender: this value goes the usual way, and so does every later one.
                    log.exception("direct send failed to start", extra={"event": "live.direct_failed"})
                    self.direct = started = None
                if started is not None:
                    sending = eagerly(started)
                    self._sending = (key, value, rank, sending)
                    if sending.done():
                        self._direct_done(sending)
                    else:
                        sending.add_done_callback(self._direct_done)
                    return
        self._items[key] = (value, rank)
        if self._sending is None:
            self._wake()

    def _direct_done(self, task: asyncio.Future[bool]) -> None:
        sending, self._sending = self._sending, None
        if sending is None or sending[3] is not task:
            return
        key, value, rank, _ = sending
        sent = not task.cancelled() and task.exception() is None and task.result() is True
        held = self._items.get(key)
        if sent:
            if self._order is not None:
                self._sent[key] = rank
                if held is not None and held[1] <= rank:
                    del self._items[key]  # offered meanwhile, and no newer than what was just sent
        elif held is None or (self._order is not None and held[1] < rank):
            # Not sent: its reader gets it, unless a newer value for the key came meanwhile.
            self._items[key] = (value, rank)
        if self._items or self.closed:
            self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __len__(self) -> int:
        return len(self._items)

    def __aiter__(self) -> Mailbox[T]:
        return self

    def __anext__(self) -> Awaitable[T]:
        return self.get()  # the coroutine itself: one frame less per value delivered

    async def get(self) -> T:
        """The next value; StopAsyncIteration once closed and drained."""
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        key = next(iter(self._items))
        value, rank = self._items.pop(key)
        if not self._items:
            self._items = {}  # a drained dict keeps its table; an idle mailbox need not
        if self._order is not None:
            self._sent[key] = rank
        return value


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
