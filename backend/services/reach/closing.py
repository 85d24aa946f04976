"""Closing what a device shows once its action stopped being pending for good."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from backend.db.engine import utcnow
from backend.domain.lifecycle import Bundle, BundleState
from backend.repository import bundles
from backend.repository import reach as repo
from backend.services.reach.asking import Asking

CLOSE_SCAN = 200  # pending ids per page of the walk that finds settled actions to close
# States an action never leaves: only these close its notifications (or skip its pushes). A claimed
# delivery is not one of them: the claim may be restored, and the action is pending again.
SETTLED = (BundleState.TERMINAL, BundleState.SUPERSEDED_HISTORY)


class Closing(Asking):
    """The walk over actions shown on some device, queueing a `close` for each settled one."""

    close_scan: int
    _close_after: str | None

    async def _states(self, pending_ids: Sequence[str]) -> dict[str, Bundle]:
        async with self.deps.db.read() as conn:
            facts = await bundles.bundle_facts(conn, list(dict.fromkeys(pending_ids)))
        return bundles_of(facts)

    async def _queue_closes(self) -> bool:
        """One page of the walk over actions shown on some device and not closed yet: a `close` for
        those settled for good. Whether the walk goes on (a full page: there may be more)."""
        async with self.deps.db.read() as conn:
            shown = await repo.sent_push_actions(conn, self._close_after, self.close_scan)
        self._close_after = shown[-1] if len(shown) >= self.close_scan else None
        if not shown:
            return False
        states = await self._states(shown)
        settled = [p for p in shown if p not in states or states[p].state in SETTLED]
        if settled:
            now = utcnow()
            async with self.deps.db.write() as conn:
                queued = await repo.queue_closes(
                    conn, settled, now, now + dt.timedelta(seconds=self.settings.notify_retry_seconds)
                )
            if queued:
                self.look_now()
        return self._close_after is not None


def bundles_of(facts: dict[str, tuple[list[Any], str, str, str | None]]) -> dict[str, Bundle]:
    return {
        pending_id: Bundle.of_rows(pending_id, task_id, rows, session_state, current_turn)
        for pending_id, (rows, task_id, session_state, current_turn) in facts.items()
    }
