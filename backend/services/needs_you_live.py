"""Needs you, live: every open inbox is sent its list again after each change to it, with no database
read per subscriber.

One hub per process follows the session-change channel (every change of every session, once) and the
access channel (grants given or taken). It drains events in batches and re-reads, once per batch, the
sessions they name that any open inbox can see (`repository/needs_you.waiting_in_sessions`: each
session's revision and active pending actions, one statement); a batch of grant changes costs one
read of the grants of the people with an inbox open and one of the sessions of the tasks they gained.
The items read are shared by every inbox that sees them; each inbox keeps, per session, the items
and the revision it holds, so a change is applied to it in memory and its list (the oldest `first`)
offered to its mailbox only when it differs from the one last offered. A slow subscriber gets the
newest list, not a backlog.

Inboxes are indexed by the tasks they see (a person: their grants) beside those that see every task
(admin and support), so a change is offered only to the inboxes of its task. An inbox registers
before its snapshot is read; a change applied meanwhile wins over the snapshot unless the snapshot
carries a newer revision of the session. After a bus gap, every inbox is re-read in one statement.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from backend.background import stop_tasks
from backend.bus import BUS_GAP, TASK_CHANNEL
from backend.domain.records import Revision
from backend.repository import needs_you as repo
from backend.services.context import Deps
from backend.services.mailbox import Mailbox
from backend.services.needs_you import NeedsYou, NeedsYouItem, SessionItems
from backend.services.token_cache import ACCESS_CHANNEL

log = logging.getLogger("turnwise.needs_you")

Items = tuple[NeedsYouItem, ...]
KEY = "inbox"


def _order(item: NeedsYouItem) -> tuple[Any, str]:
    return item.order


class InboxWatcher:
    """One open inbox: whose it is, the tasks it sees (None: every task), the items it holds per
    session, and its mailbox (one key: the list)."""

    __slots__ = ("first", "last", "mailbox", "ready", "sessions", "tasks", "user_id")

    def __init__(self, user_id: str | None, tasks: frozenset[str] | None, first: int) -> None:
        # A person's id, whose grants are re-read when grants change; None for who sees every task.
        self.user_id = user_id
        self.tasks = tasks
        self.first = first
        # session -> (its task, the revision read, its items); a session with no items is kept only
        # until the snapshot was applied (a change applied before it must win over an older read).
        self.sessions: dict[str, tuple[str, Revision, Items]] = {}
        self.ready = False
        self.last: Items | None = None
        self.mailbox: Mailbox[Items] = Mailbox()

    def sees(self, task_id: str) -> bool:
        return self.tasks is None or task_id in self.tasks

    def apply(self, read: SessionItems, *, snapshot: bool = False) -> None:
        """One session as a read found it, unless what is held is newer (for a snapshot: at least as
        new, since a change applied before it was read after its event)."""
        held = self.sessions.get(read.session_id)
        if held is not None:
            newer, kept = read.revision.key(), held[1].key()
            if newer < kept or (snapshot and newer <= kept):
                return
        if read.items or not self.ready:
            self.sessions[read.session_id] = (read.task_id, read.revision, read.items)
        else:
            self.sessions.pop(read.session_id, None)

    def drop_tasks(self, task_ids: frozenset[str]) -> None:
        for session_id in [s for s, (t, _, _) in self.sessions.items() if t in task_ids]:
            del self.sessions[session_id]

    def snapshot_applied(self) -> None:
        self.ready = True
        for session_id in [s for s, (_, _, items) in self.sessions.items() if not items]:
            del self.sessions[session_id]

    def offer(self) -> None:
        """Its list now, if it differs from the one last offered (nothing before its snapshot: its
        first list is the whole of it)."""
        if not self.ready:
            return
        held: Iterable[NeedsYouItem] = chain.from_iterable(items for _, _, items in self.sessions.values())
        now = tuple(heapq.nsmallest(self.first, held, key=_order))
        if now != self.last:
            self.last = now
            self.mailbox.offer(KEY, now)


class InboxRegistration:
    """`with hub.watch(...) as watcher`: in the hub's index for as long as the block runs."""

    __slots__ = ("hub", "watcher")

    def __init__(self, hub: NeedsYouHub, watcher: InboxWatcher) -> None:
        self.hub = hub
        self.watcher = watcher

    def __enter__(self) -> InboxWatcher:
        self.hub.opened(self.watcher)
        return self.watcher

    def __exit__(self, *_exc: object) -> None:
        self.hub.closed(self.watcher)


@dataclass
class NeedsYouHub:
    deps: Deps
    needs_you: NeedsYou
    # Inboxes by the task they see; those that see every task apart.
    _by_task: dict[str, set[InboxWatcher]] = field(default_factory=dict)
    _everything: set[InboxWatcher] = field(default_factory=set)
    # Every open inbox (one that sees no task yet too: a grant may come).
    _open: set[InboxWatcher] = field(default_factory=set)
    _raw: list[dict[str, Any]] = field(default_factory=list)
    _access_changed: bool = False
    _gap: bool = False
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # Database reads made for changes (not snapshots): what a bench compares with the inboxes open.
    reads: int = 0

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._work()))
        bus = self.deps.bus
        self._tasks.append(await bus.follow(TASK_CHANNEL, self._on_session, after_gap={"type": BUS_GAP}))
        self._tasks.append(await bus.follow(ACCESS_CHANNEL, self._on_access, after_gap={"type": BUS_GAP}))

    async def stop(self) -> None:
        await stop_tasks(self._tasks, log, "needs-you hub task")
        self._tasks.clear()
        for watcher in self.watchers:
            watcher.mailbox.close()

    @property
    def watchers(self) -> set[InboxWatcher]:
        return set(self._open)

    # --- registration -------------------------------------------------------------------------

    def watch(self, user_id: str | None, tasks: frozenset[str] | None, first: int) -> InboxRegistration:
        return InboxRegistration(self, InboxWatcher(user_id, tasks, first))

    def opened(self, watcher: InboxWatcher) -> None:
        self._open.add(watcher)
        self.index(watcher)

    def closed(self, watcher: InboxWatcher) -> None:
        self._open.discard(watcher)
        self.unindex(watcher)
        watcher.mailbox.close()

    def index(self, watcher: InboxWatcher) -> None:
        if watcher.tasks is None:
            self._everything.add(watcher)
            return
        for task_id in watcher.tasks:
            self._by_task.setdefault(task_id, set()).add(watcher)

    def unindex(self, watcher: InboxWatcher) -> None:
        self._everything.discard(watcher)
        for task_id in watcher.tasks or ():
            group = self._by_task.get(task_id)
            if group is not None:
                group.discard(watcher)
                if not group:
                    del self._by_task[task_id]

    def _watching(self, task_id: str) -> Iterable[InboxWatcher]:
        return chain(self._by_task.get(task_id, ()), self._everything)

    async def snapshot(self, watcher: InboxWatcher) -> None:
        """The inbox's scope read (after it registered) and applied, then its first list offered."""
        tasks = None if watcher.tasks is None else sorted(watcher.tasks)
        async with self.deps.db.read() as conn:
            found = await self.needs_you.sessions(conn, await repo.sessions_waiting(conn, tasks))
        for read in found:
            if watcher.sees(read.task_id):
                watcher.apply(read, snapshot=True)
        watcher.snapshot_applied()
        watcher.offer()

    # --- bus ----------------------------------------------------------------------------------

    def _on_session(self, event: dict[str, Any]) -> None:
        if event.get("type") == BUS_GAP:
            self._gap = True
        else:
            self._raw.append(event)
        self._wake.set()

    def _on_access(self, event: dict[str, Any]) -> None:
        if event.get("type") == BUS_GAP:
            self._gap = True
        else:
            self._access_changed = True
        self._wake.set()

    # --- worker -------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._raw = self._raw, []
            gap, self._gap = self._gap, False
            access_changed, self._access_changed = self._access_changed, False
            try:
                if gap:
                    await self.resync()
                    continue
                if access_changed:
                    await self._regrant()
                await self._deliver(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("inbox delivery failed", extra={"event": "needs_you.delivery_failed"})

    async def _deliver(self, batch: list[dict[str, Any]]) -> None:
        """Re-read the sessions the batch names that an open inbox sees, once, and apply them."""
        wanted: dict[str, str] = {}
        for event in batch:
            session_id, task_id = event.get("session_id"), event.get("task_id")
            watched = isinstance(task_id, str) and (bool(self._everything) or task_id in self._by_task)
            if isinstance(session_id, str) and isinstance(task_id, str) and watched:
                wanted[session_id] = task_id
        if not wanted:
            return
        self.reads += 1
        async with self.deps.db.read() as conn:
            found = await self.needs_you.sessions(conn, await repo.waiting_in_sessions(conn, sorted(wanted)))
        self._apply(found)

    def _apply(self, found: Iterable[SessionItems]) -> None:
        touched: set[InboxWatcher] = set()
        for read in found:
            for watcher in self._watching(read.task_id):
                watcher.apply(read)
                touched.add(watcher)
        for watcher in touched:
            watcher.offer()

    async def _regrant(self) -> None:
        """Grants changed somewhere: each open person's inbox takes their grants as they are now, drops
        the tasks they lost and reads the tasks they gained (one read for all of them)."""
        people = [w for w in self.watchers if w.user_id is not None and w.tasks is not None]
        if not people:
            return
        self.reads += 1
        async with self.deps.db.read() as conn:
            grants = await repo.grants_of(conn, [w.user_id for w in people if w.user_id is not None])
            gained: dict[InboxWatcher, frozenset[str]] = {}
            for watcher in people:
                now = grants.get(watcher.user_id or "", frozenset())
                old = watcher.tasks or frozenset()
                if now == old:
                    continue
                self.unindex(watcher)
                watcher.tasks = now
                self.index(watcher)
                watcher.drop_tasks(old - now)
                gained[watcher] = now - old
                watcher.offer()
            wanted = sorted(set(chain.from_iterable(gained.values())))
            found = await self.needs_you.sessions(conn, await repo.sessions_waiting(conn, wanted))
        for watcher, tasks in gained.items():
            for read in found:
                if read.task_id in tasks:
                    watcher.apply(read)
            watcher.offer()

    async def resync(self) -> None:
        """After a bus gap (changes may have been missed): every inbox re-read, in one statement."""
        watchers = self.watchers
        if not watchers:
            return
        everything = bool(self._everything)
        tasks = None if everything else sorted({t for w in watchers for t in w.tasks or ()})
        self.reads += 1
        async with self.deps.db.read() as conn:
            found = await self.needs_you.sessions(conn, await repo.sessions_waiting(conn, tasks))
        for watcher in watchers:
            watcher.sessions = {
                r.session_id: (r.task_id, r.revision, r.items) for r in found if watcher.sees(r.task_id)
            }
            watcher.offer()
        log.info("open inboxes resynced", extra={"event": "needs_you.resynced", "inboxes": len(watchers)})
