"""The orchestrator's per-process state stays bounded: nothing is kept per session or per turn once
the durable state answers for it."""

from __future__ import annotations

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.lru import LRU
from backend.services import orchestrator
from backend.services.pending.core import trusted
from tests.lifecycle.support import new_session, yes
from tests.resume.support import detached_question, faulty, resuming


async def test_admission_locks_and_accepted_turns_are_let_go_once_each_answer_resolved(db: Database) -> None:
    async with resuming(db, ["accepted", "rejected", "ambiguous", "accepted"]) as (svc, executor):
        results = []
        for fault in ("", "", "", "resume.publish"):
            _, session_id = await new_session(svc)
            agent = await detached_question(svc, session_id)
            async with faulty(*([fault] if fault else [])):
                results.append(
                    await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
                )
            await agent.close()
        # Accepted, refused (rolled back), ambiguous (outbox), accepted but unpublished (outbox).
        assert [type(r) for r in results] == [
            lc.Responded,
            lc.DeliveryFailed,
            lc.DeliveryFailed,
            lc.DeliveryFailed,
        ]
        assert len(executor.received) == 4
        held = svc.orchestrator.held()
        assert held["admission_locks"] == 0
        assert held["accepted"] == 0
        assert held["live"] == 0
        # Own turns are remembered only for the watchdogs' event filter, newest first.
        assert 1 <= held["own_turns"] <= orchestrator.OWN_TURNS_KEPT


def test_own_turns_keep_only_the_newest() -> None:
    recent: LRU[str, None] = LRU(3)
    for i in range(10):
        recent.put(f"t{i}", None)
    assert len(recent) == 3
    assert [f"t{i}" in recent for i in range(10)] == [False] * 7 + [True] * 3
