"""Claims left unrestored by an outage, restored by the running server once the database answers.

A responder restores its claim when delivery fails (`Responding._recover_claim`). When the
database is unreachable at that moment, or when the claim's own COMMIT failed without a reply (the
claim may or may not have been written), nothing restores it until the next startup's recovery,
and the question would stay claimed. Such claims are handed here: while any is left, the restorer
probes the database (every `PROBE_SECONDS` at most) and, as soon as it answers, runs the same
restore as the responder would have: under the session's lock, only this claim's rows, only while
their turn is current in a live session (never after a successor), otherwise retired; a claim the
waiter already settled, or one never written, changes nothing (never twice). So a claim is back
within about `PROBE_SECONDS` plus one unit of work of the database answering again.

A waiter whose confirmation failed for the outage keeps waiting (`keep_attached`): its claim is
restored still attached to it, so the person's retry hands the answer to the same agent. So is a
live claim whose COMMIT's reply was lost: its waiter never got a hand-off and still waits. (Rows
restored attached to a waiter that has gone meanwhile read as detached: liveness is decided at
each respond, not stored.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from backend.background import stop_tasks
from backend.db.engine import Database
from backend.db.health import is_outage
from backend.domain.lifecycle import Claim

log = logging.getLogger("turnwise.pending")

PROBE_SECONDS = 1.0
UNAVAILABLE_RETRY = "the database is unavailable right now; nothing was delivered, retry shortly"
UNAVAILABLE_LATER = (
    "the database is unavailable right now; the question becomes answerable again once it is back, retry then"
)


class Restorer:
    def __init__(self, db: Database, restore: Callable[[Claim, bool], Awaitable[None]]) -> None:
        self._db = db
        # restore(claim, detach_rows)
        self._restore = restore
        # claim id -> (claim, whether its restore detaches the rows from their waiter)
        self._claims: dict[str, tuple[Claim, bool]] = {}
        self._attached: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> list[str]:
        """Claim ids not yet restored (for tests and diagnosis)."""
        return sorted(self._claims)

    def keep_attached(self, claim_id: str) -> None:
        self._attached.add(claim_id)

    def detaches(self, claim_id: str) -> bool:
        """Whether restoring this claim detaches its rows from their waiter: yes, unless that waiter
        is alive here and only failed to confirm for the outage (then it is forgotten: asked once)."""
        if claim_id in self._attached:
            self._attached.discard(claim_id)
            return False
        return True

    def later(self, claim: Claim, *, detach_rows: bool = True) -> None:
        """Restore this claim once the database answers again."""
        self._claims[claim.claim_id] = (claim, detach_rows)
        log.warning(
            "claim left for the restorer",
            extra={"event": "pending.restore_deferred", "kind": claim.kind.value, "claim_id": claim.claim_id},
        )
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await stop_tasks([self._task], log, "claim restorer")
        self._task = None

    async def _run(self) -> None:
        delay = 0.1
        while self._claims:
            await asyncio.sleep(delay)
            delay = min(delay * 2, PROBE_SECONDS)
            try:
                if not await self._db.probe():
                    continue
            except Exception:
                log.exception("database probe failed", extra={"event": "pending.restore_probe_failed"})
                continue
            for claim_id, (claim, detach_rows) in list(self._claims.items()):
                try:
                    await self._restore(claim, detach_rows)
                except Exception as exc:
                    if is_outage(exc):
                        break  # gone again: the next probe decides
                    # A defect, not an outage: logged once and left to the next startup's recovery,
                    # rather than retried in a loop.
                    log.exception(
                        "deferred restore failed",
                        extra={"event": "pending.restore_failed", "claim_id": claim_id},
                    )
                self._claims.pop(claim_id, None)
