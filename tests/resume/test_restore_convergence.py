"""A detached answer whose resume was rejected is restored: summaries and other clients converge on it
before (S39), or despite the failure of (S40), the retryable result."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import INTENT_KEY, BundleState
from backend.domain.records import SummaryRecord
from backend.services.container import Services
from backend.services.pending.core import trusted
from backend.services.summaries import SUMMARY_CHANNEL
from tests.lifecycle.support import Driver, Kind, new_session, recording, rows
from tests.resume.support import GatedExecutor, detached_request, eventually, faulty, resuming
from tests.services.support import stored_summary


def watch_refresh(svc: Services, order: list[Any]) -> None:
    """Record each summary acknowledgement the respond path makes, in order with its result."""
    original = svc.pending.refresh_summaries
    assert original is not None

    async def refresh(task_ids: list[str]) -> Any:
        try:
            done: dict[str, SummaryRecord] = await original(task_ids)
        except Exception as exc:
            order.append(("summary failed", type(exc).__name__))
            raise
        order.append(("summary", {t: s.pending_action for t, s in done.items()}))
        return done

    svc.pending.refresh_summaries = refresh


async def claimed_then_rejected(
    svc: Services, gate: GatedExecutor, kind: Kind, agent: Driver, task_id: str, order: list[Any]
) -> tuple[lc.RespondOutcome, int]:
    """Respond; while the dispatch is held read the task list; then the agent rejects the prompt."""
    respond = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
    await asyncio.wait_for(gate.started.wait(), 5)
    # A task-list read during the temporary claim: the claimed answer hides the pending action.
    during = (await svc.summaries.reconcile([task_id]))[task_id]
    assert during.summary is not None
    assert during.summary.pending_action is None
    bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
    assert bundle is not None
    assert bundle.state == BundleState.DELIVERY_CLAIMED
    gate.release("rejected")
    result = await respond
    order.append("returned")
    return result, during.summary.revision


async def summary_events(svc: Services, into: list[dict[str, Any]], ready: asyncio.Event) -> None:
    async with svc.deps.bus.subscribe(SUMMARY_CHANNEL) as events:
        ready.set()
        async for e in events:
            into.append(e)


def restored_ids(stored: Iterable[dict[str, Any]]) -> list[str]:
    return [str(r["id"]) for r in stored]


@pytest.mark.scenario("S39")
async def test_restore_acknowledges_summary_convergence_before_reporting_retryability_and_publishes(
    db: Database, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        task_id, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        order: list[Any] = []
        watch_refresh(svc, order)
        summaries: list[dict[str, Any]] = []
        ready = asyncio.Event()
        listener = asyncio.create_task(summary_events(svc, summaries, ready))
        await ready.wait()
        async with recording(svc) as log:
            result, seen_revision = await claimed_then_rejected(svc, gate, kind, agent, task_id, order)
            stored = await rows(db, agent.pending_id)
            await eventually(lambda: log.kinds("message.updated")[-len(stored) :] == restored_ids(stored))
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is True
        assert "answerable again" in result.message
        assert "not yet" not in result.message
        # The summary convergence was acknowledged (durably written) before the result was reported.
        assert order == [("summary", {task_id: str(kind)}), "returned"]
        durable = await stored_summary(db, task_id)
        assert durable is not None
        assert durable["pending_action"] == str(kind)
        assert durable["revision"] > seen_revision
        await eventually(lambda: any(e["pending_action"] == str(kind) for e in summaries))
        # The restored pending rows were published, so other clients converge on them.
        assert {r["status"] for r in stored} == {"pending"}
        assert not any(INTENT_KEY in r for r in stored)
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        listener.cancel()
        await agent.close()


@pytest.mark.scenario("S40")
@pytest.mark.parametrize("failure", ["summary", "publication"])
async def test_restore_reports_a_convergence_failure_and_still_says_the_answer_is_safe_to_retry(
    db: Database, failure: str, kind: Kind
) -> None:
    gate = GatedExecutor()
    settings: dict[str, Any] = {"fault_points": ("summary.cas_conflict",)} if failure == "summary" else {}
    async with resuming(db, executor=gate, **settings) as (svc, _):
        task_id, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        order: list[Any] = []
        watch_refresh(svc, order)
        points = ("clarification.restore_publish",) if failure == "publication" else ()
        async with recording(svc) as log, faulty(*points):
            result, _ = await claimed_then_rejected(svc, gate, kind, agent, task_id, order)
        assert isinstance(result, lc.DeliveryFailed)
        # The convergence error is reported, and the answer is still identified as safe to retry.
        assert result.retryable is True
        assert "answerable again" in result.message
        stored = await rows(db, agent.pending_id)
        if failure == "summary":
            assert "task summary not yet converged" in result.message
            assert order == [("summary failed", "SummaryConvergenceError"), "returned"]
            # The restored rows were published even though the acknowledgement failed.
            assert log.kinds("message.updated")[-len(stored) :] == restored_ids(stored)
        else:
            assert "other clients not yet told" in result.message
            assert order == [("summary", {task_id: str(kind)}), "returned"]
            restored = set(restored_ids(stored))
            assert not restored & set(log.kinds("message.updated"))
        # The restore itself is durable: pending rows, no intent, answerable; a retry goes through.
        assert {r["status"] for r in stored} == {"pending"}
        assert not any(INTENT_KEY in r for r in stored)
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        retry = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
        await eventually(lambda: len(gate.received) == 2)
        gate.release("accepted")
        accepted = await retry
        assert isinstance(accepted, lc.Responded)
        assert accepted.resumed is True
        await agent.close()
