"""The audit trail: every settled pending action of a scope, newest decision first, as a person reads
it (who decided, when, what, and the rule that did), read in one statement."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from backend.domain import decisions as rules
from backend.domain.errors import InvalidInput
from backend.domain.lifecycle import Bundle
from backend.repository import decisions as repo
from backend.services.context import Deps

DEFAULT_FIRST = 100
MAX_FIRST = 500


@dataclass(frozen=True, slots=True)
class DecisionView:
    bundle: Bundle
    asked_at: dt.datetime
    decided_at: dt.datetime
    reading: rules.Reading


@dataclass
class Decisions:
    deps: Deps

    async def trail(
        self, *, session_id: str | None = None, task_ids: Sequence[str] | None = None, first: int
    ) -> list[DecisionView]:
        """Of one session, of these tasks, or (neither) of every task."""
        if not 1 <= first <= MAX_FIRST:
            raise InvalidInput("first", f"must be between 1 and {MAX_FIRST}")
        async with self.deps.db.read() as conn:
            found = await repo.settled(conn, session_id=session_id, task_ids=task_ids, first=first)
        out = []
        for facts in found:
            bundle = Bundle.of_rows(
                facts.pending_id, facts.task_id, facts.rows, facts.session_state, facts.current_turn
            )
            reading = rules.read(bundle, decided_by_name=facts.decided_by)
            out.append(DecisionView(bundle, facts.asked_at, facts.decided_at, reading))
        return out
