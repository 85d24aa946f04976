"""The audit trail in process: a person's response stored before who decided was kept reads as
"unknown"; one stored since names the person."""

from __future__ import annotations

import pytest

from backend.db.engine import Database
from backend.services.pending.core import trusted
from tests.lifecycle.support import Agent, new_session, running, yes


@pytest.mark.parametrize("named", [False, True], ids=["stored-before", "stored"])
async def test_a_decision_names_who_decided_or_reads_unknown_when_that_was_not_stored(
    db: Database, named: bool
) -> None:
    async with running(db) as services:
        ada = await services.access.create_user("ada", "user")
        _, session_id = await new_session(services)
        agent = await Agent.ask(services, session_id)
        agent.wait()
        try:
            await services.pending.respond(
                agent.pending_id,
                yes("q1"),
                rejected=False,
                authorize=trusted,
                decided_by=ada.id if named else None,
            )
            await agent.outcome()
        finally:
            await agent.close()
        (decision,) = await services.decisions.trail(session_id=session_id, first=10)
    assert (decision.reading.outcome, decision.reading.decided_by) == (
        "ANSWERED",
        "ada" if named else "unknown",
    )
    assert decision.reading.summary == "answered: SQLite"
