"""Task summaries reconcile from the derivation by compare-and-set (spec: persistence guarantees)."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from backend.db.engine import Database, utcnow
from backend.db.tables import task_status_summaries
from backend.domain.errors import SummaryConvergenceError
from backend.domain.states import SessionState
from backend.services.container import Services
from tests.lifecycle.support import Kind
from tests.services.support import ask, services_for, stored_summary


async def running_session(services: Services, title: str = "t") -> tuple[str, str]:
    task = await services.operations.create_task(title)
    session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
    await services.operations.set_session_state(session.id, SessionState.RUNNING)
    await services.operations.start_turn(session.id)
    return task.id, session.id


@pytest.mark.scenario("S08")
async def test_stale_summary_is_repaired_with_a_newer_revision_and_unrelated_fields_kept(
    db: Database, kind: Kind
) -> None:
    async with services_for(db) as services:
        task_id, _ = await running_session(services)
        async with db.write() as conn:
            await conn.execute(
                task_status_summaries.insert().values(
                    task_id=task_id,
                    revision=7,
                    pending_action=kind.value.value,
                    fields={"workflow": "review", "unread": 3},
                    updated_at=utcnow(),
                )
            )
        views = await services.summaries.reconcile([task_id])
        summary = views[task_id].summary
        assert summary is not None
        assert (summary.revision, summary.pending_action) == (8, None)
        row = await stored_summary(db, task_id)
        assert row is not None
        assert row["revision"] == 8
        assert row["pending_action"] is None
        assert row["fields"] == {"workflow": "review", "unread": 3}


async def test_revision_advances_only_on_a_semantic_change(db: Database) -> None:
    async with services_for(db) as services:
        task_id, session_id = await running_session(services)
        first = (await services.summaries.refresh([task_id]))[task_id]
        assert (first.revision, first.pending_action) == (1, None)
        await services.operations.post_message(session_id, content="hi", author="agent", kind="message")
        again = (await services.summaries.refresh([task_id]))[task_id]
        assert again.revision == 1
        await ask(db, session_id)
        asked = (await services.summaries.refresh([task_id]))[task_id]
        assert (asked.revision, asked.pending_action) == (2, "clarification")


async def test_task_pending_counts_only_working_sessions_and_permission_outranks_clarification(
    db: Database,
) -> None:
    async with services_for(db) as services:
        task_id, questioning = await running_session(services)
        await ask(db, questioning)
        permitting = await services.operations.create_session(task_id, is_primary=False, input_capable=True)
        await services.operations.start_turn(permitting.id)
        await services.operations.post_message(
            permitting.id, content="may I?", author="agent", kind="permission_request"
        )
        # A CREATED session's permission request does not count at task level yet.
        assert (await services.summaries.refresh([task_id]))[task_id].pending_action == "clarification"
        await services.operations.set_session_state(permitting.id, SessionState.WAITING_FOR_INPUT)
        assert (await services.summaries.refresh([task_id]))[task_id].pending_action == "permission"
        await services.operations.set_session_state(permitting.id, SessionState.COMPLETED)
        await services.operations.set_session_state(questioning, SessionState.CANCELLED)
        assert (await services.summaries.refresh([task_id]))[task_id].pending_action is None


async def test_exhausted_compare_and_set_gives_no_summary_and_refresh_raises(db: Database) -> None:
    async with services_for(db, fault_points=("summary.cas_conflict",)) as services:
        task_id, session_id = await running_session(services)
        await services.summaries.reconcile([task_id])  # creates revision 1, clean
        await ask(db, session_id)
        views = await services.summaries.reconcile([task_id])
        assert views[task_id].summary is None
        assert [s.id for s in views[task_id].sessions] == [session_id]
        with pytest.raises(SummaryConvergenceError):
            await services.summaries.refresh([task_id])
        row = await stored_summary(db, task_id)
        # Every competing write won; the cache still says clean and nobody acknowledged otherwise.
        assert row is not None
        assert row["pending_action"] is None


async def test_lost_race_rereads_and_converges(db: Database) -> None:
    async with services_for(db) as services:
        task_id, session_id = await running_session(services)
        await services.summaries.refresh([task_id])
        await ask(db, session_id)
        # Another writer moved the revision on (as a concurrent reconciler would) without the change.
        async with db.write() as conn:
            await conn.execute(update(task_status_summaries).values(revision=5))
        summary = (await services.summaries.refresh([task_id]))[task_id]
        assert (summary.revision, summary.pending_action) == (6, "clarification")


async def test_reconciling_many_tasks_costs_a_constant_number_of_statements(db: Database) -> None:
    async with services_for(db) as services:
        counts = []
        for n in (3, 30):
            ids = []
            for i in range(n):
                task_id, session_id = await running_session(services, f"t{i}")
                if i % 2:
                    await ask(db, session_id)
                ids.append(task_id)
            before = db.statements
            await services.summaries.reconcile(ids)  # creates every summary
            created = db.statements - before
            async with db.write() as conn:
                await conn.execute(update(task_status_summaries).values(pending_action="permission"))
            before = db.statements
            views = await services.summaries.reconcile(ids)  # repairs every summary
            repaired = db.statements - before
            assert all(v.summary is not None for v in views.values())
            counts.append((created, repaired))
        assert counts[0] == counts[1]
