"""The losers of a concurrent second response write nothing and resume nothing (`delivery_claimed`).

The first response holds its claim (its delivery is held back); meanwhile several second responses
arrive at once. Each gets a conflict, and the database is exactly as the first claim left it: no
row, sequence, summary, turn or inbox item changed, none of their answers stored anywhere, no event
published, and no second prompt dispatched.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sqlalchemy import select

from backend.db import tables
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import INTENT_KEY, Answer, BundleState, ConflictReason
from backend.services.container import Services
from backend.services.pending.core import trusted
from tests.lifecycle.support import Agent, new_session, recording, rows, running
from tests.resume.support import GatedExecutor, detached_question, resuming

LOSERS = 8
# Everything a respond could write (the meta table is left out: heartbeats write it on their own).
STATE_TABLES = (
    tables.tasks,
    tables.task_sessions,
    tables.task_session_turns,
    tables.task_session_messages,
    tables.task_status_summaries,
    tables.session_inbox,
)


async def database_state(db: Database) -> dict[str, list[dict[str, Any]]]:
    async with db.read() as conn:
        state = {}
        for table in STATE_TABLES:
            result = await conn.execute(select(table).order_by(*table.primary_key.columns))
            state[table.name] = [dict(r._mapping) for r in result]
        return state


def answer(text: str) -> list[Answer]:
    return [Answer("q1", (), text)]


async def claim_held(db: Database, pending_id: str) -> None:
    for _ in range(500):
        if all(r.get(INTENT_KEY) for r in await rows(db, pending_id)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the first response never claimed the bundle")


async def second_responses(svc: Services, pending_id: str) -> list[lc.RespondOutcome]:
    return list(
        await asyncio.gather(
            *(
                # Answers and skips alike.
                svc.pending.respond(
                    pending_id, [] if i % 2 else answer(f"loser {i}"), rejected=i % 2 == 1, authorize=trusted
                )
                for i in range(LOSERS)
            )
        )
    )


def assert_conflicts(results: list[lc.RespondOutcome]) -> None:
    assert all(isinstance(r, lc.Conflict) for r in results), results
    assert {r.reason for r in results if isinstance(r, lc.Conflict)} == {ConflictReason.DELIVERY_CLAIMED}


def stored_nowhere(state: dict[str, list[dict[str, Any]]]) -> None:
    text = json.dumps(state, default=str)
    assert "loser" not in text, "a losing answer was written"


async def test_second_responses_to_a_live_claim_in_flight_write_nothing(db: Database) -> None:
    async with running(db, live_confirmation_seconds=30.0) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)  # holds the first claim's delivery until it waits
        first = asyncio.create_task(
            svc.pending.respond(agent.pending_id, answer("the winner"), rejected=False, authorize=trusted)
        )
        await claim_held(db, agent.pending_id)
        before = await database_state(db)
        async with recording(svc) as log:
            results = await second_responses(svc, agent.pending_id)
        assert_conflicts(results)
        after = await database_state(db)
        assert after == before
        stored_nowhere(after)
        assert log.events == []
        # The first response is delivered as if the losers had never come.
        agent.wait()
        assert isinstance(await asyncio.wait_for(first, 10), lc.Responded)
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Answered)
        assert [a.custom_text for a in outcome.question_answers] == ["the winner"]
        await agent.close()


async def test_second_responses_to_a_detached_claim_in_flight_write_nothing_and_resume_nothing(
    db: Database,
) -> None:
    gate = GatedExecutor()  # holds the first response's dispatch
    async with resuming(db, executor=gate) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        first = asyncio.create_task(
            svc.pending.respond(agent.pending_id, answer("the winner"), rejected=False, authorize=trusted)
        )
        await asyncio.wait_for(gate.started.wait(), 5)
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.DELIVERY_CLAIMED
        before = await database_state(db)
        async with recording(svc) as log:
            results = await second_responses(svc, agent.pending_id)
        assert_conflicts(results)
        after = await database_state(db)
        assert after == before
        stored_nowhere(after)
        assert log.events == []
        assert len(gate.received) == 1, "a losing response dispatched a prompt"
        gate.release("accepted")
        result = await asyncio.wait_for(first, 10)
        assert isinstance(result, lc.Responded)
        assert result.resumed is True
        assert len(gate.received) == 1
        assert "the winner" in gate.received[0].prompt
        await agent.close()
