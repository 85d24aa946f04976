"""The ask's part of reach: its outbox rows, written in its unit of work, and the wake-ups they send."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from backend.db.engine import utcnow
from backend.repository import reach as repo
from backend.services.reach.base import Part
from backend.services.uow import Work

# Every worker hears here that an ask wrote outbox rows, and when they are due (published only then:
# an ask that tells nobody publishes nothing).
WAKE_CHANNEL = "turnwise.reach"
WAKE = "reach.due"


def due_of(event: dict[str, Any]) -> dt.datetime | None:
    """The due time a wake-up message names (None: not a wake-up, e.g. the bus's gap marker)."""
    if event.get("type") != WAKE:
        return None
    try:
        due = dt.datetime.fromisoformat(str(event.get("due")))
    except ValueError:
        return None
    return due if due.tzinfo is not None else None


class Asking(Part):
    """An ask's outbox rows, and telling the workers when they are due."""

    _wake: asyncio.Event
    _soonest: dt.datetime | None
    _look: bool

    def ask_outbox(self) -> repo.AskOutbox:
        """When a new pending action's outbox rows are due and given up."""
        now = utcnow()
        due = now + dt.timedelta(seconds=self.settings.notify_after_seconds)
        return repo.AskOutbox(due, due + dt.timedelta(seconds=self.settings.notify_retry_seconds), now)

    async def asked(
        self,
        work: Work,
        pending_id: str,
        task_id: str,
        session_id: str,
        outbox: repo.AskOutbox,
        written: int | None,
    ) -> None:
        """In the ask's unit of work: the outbox rows of a new pending action (one statement, unless
        the ask's own statement wrote them: `written`, how many). Only when somebody has a
        destination (rows were written) is any worker told, once the ask committed: this process's
        at once, every other process's through the bus (`WAKE_CHANNEL`, with the due time)."""
        if written is None:
            written = await repo.enqueue_ask(
                work.conn, pending_id=pending_id, task_id=task_id, session_id=session_id, outbox=outbox
            )
        if written:
            work.after_commit(lambda: self.wake_at(outbox.due_at))
            work.post(WAKE_CHANNEL, {"type": WAKE, "due": outbox.due_at.isoformat()})

    def wake_at(self, due: dt.datetime) -> None:
        """Rows are due at `due` (committed): the worker looks by then."""
        if self._soonest is None or due < self._soonest:
            self._soonest = due
            self._wake.set()

    def look_now(self) -> None:
        """The worker looks at the outbox at once (a bus gap may have hidden a wake-up; closes queued)."""
        self._look = True
        self._wake.set()
