"""The durable inbox: a late answer for an agent that holds no prompt channel is queued and reaches it
exactly once when it comes back, unless a newer turn superseded it."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict
from typing import Any

from sqlalchemy import select

from backend.db.engine import Database
from backend.db.tables import session_inbox
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState
from backend.executors.base import PromptRequest
from backend.executors.scripted import ScriptedExecutor
from backend.repository import runners, turns
from backend.services.container import Services
from backend.services.pending.core import trusted
from backend.services.prompt_channel import prompts_channel
from backend.services.watchdog import Watch
from tests.lifecycle.support import Agent, new_session, questions, recording, rows, yes
from tests.resume.support import detached_question, eventually, resuming, turn_rows


async def inbox_rows(db: Database, session_id: str) -> list[dict[str, Any]]:
    async with db.read() as conn:
        result = await conn.execute(select(session_inbox).where(session_inbox.c.session_id == session_id))
        return [dict(r._mapping) for r in result]


async def channel_holder(svc: Services, session_id: str) -> str:
    """The runner holding the session's prompt channel, once its lease is written (hold() entered)."""
    holder = None
    for _ in range(250):
        async with svc.deps.db.read() as conn:
            holder = await runners.live_holder(conn, session_id)
        if holder is not None:
            return holder
        await asyncio.sleep(0.02)
    raise AssertionError("the runner never held the channel")


async def first_prompts(svc: Services, session_id: str) -> list[PromptRequest]:
    """What a runner that connects now receives before anything else: it holds the channel until a
    probe dispatched after it connected arrives (queued items always come before live ones)."""
    got: list[PromptRequest] = []
    probe = PromptRequest(session_id, "probe-task", "probe-turn", "probe-turn", "probe")

    async def hold() -> None:
        async with svc.prompts.hold(session_id) as prompts:
            async for request in prompts:
                got.append(request)
                if request == probe:
                    return

    holding = asyncio.create_task(hold())
    holder = await channel_holder(svc, session_id)
    await svc.deps.bus.publish(prompts_channel(session_id), {"runner_id": holder, "request": asdict(probe)})
    await asyncio.wait_for(holding, 10)
    assert got[-1] == probe
    return got[:-1]


async def channel_session(svc: Services, qs: list[dict[str, Any]] | None = None) -> tuple[str, Agent]:
    """A session whose agent uses the prompt channel, which nobody holds, and its detached question."""
    svc.orchestrator.executor = svc.prompts
    _, session_id = await new_session(svc)
    return session_id, await detached_question(svc, session_id, qs)


async def answer(svc: Services, agent: Agent) -> lc.RespondOutcome:
    return await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)


async def queued_answer(svc: Services, agent: Agent) -> None:
    """Answer the question; with no runner to resume, the answer is queued."""
    result = await answer(svc, agent)
    assert isinstance(result, lc.Responded)
    assert result.queued


async def test_an_answer_without_a_runner_is_queued_durably_and_the_request_succeeds(db: Database) -> None:
    async with resuming(db) as (svc, _):
        session_id, agent = await channel_session(svc, questions(2))
        source_turn = agent.bundle.turn_id  # type: ignore[union-attr]
        async with recording(svc) as log:
            result = await svc.pending.respond(
                agent.pending_id, yes("q1", "q2"), rejected=False, authorize=trusted
            )
            await eventually(lambda: any(e["type"] == "turn.started" for e in log.events))
        assert isinstance(result, lc.Responded)
        assert (result.resumed, result.queued) == (False, True)
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"answered"}
        assert all(r["response_queued"] is True for r in stored)
        assert not any("response_delivery_pending" in r for r in stored)
        (item,) = await inbox_rows(db, session_id)
        successor = [t for t in await turn_rows(db, session_id) if t["id"] != source_turn]
        assert [t["id"] for t in successor] == [item["turn_id"]]
        # The start event went out and its outbox marker was cleared; no private key remains.
        assert successor[0]["metadata"] == {}
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == item["turn_id"]
        assert (item["pending_id"], item["source_turn_id"]) == (agent.pending_id, source_turn)
        assert item["delivered_at"] is None
        assert "You previously asked the user several questions" in item["prompt"]
        assert [a["selected_option_ids"] for a in item["answers"]] == [["q1_opt1"], ["q2_opt1"]]
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.TERMINAL
        await agent.close()


async def test_the_next_runner_gets_the_queued_prompt_first_and_exactly_once(db: Database) -> None:
    async with resuming(db) as (svc, _):
        session_id, agent = await channel_session(svc)
        await queued_answer(svc, agent)
        (item,) = await inbox_rows(db, session_id)
        first = await first_prompts(svc, session_id)
        assert [(p.turn_id, p.generation, p.pending_id) for p in first] == [
            (item["turn_id"], item["turn_id"], agent.pending_id)
        ]
        assert first[0].prompt == item["prompt"]
        assert await first_prompts(svc, session_id) == [], "never delivered twice"
        assert await svc.inbox.acknowledge(item["turn_id"]) is True
        (taken,) = await inbox_rows(db, session_id)
        assert taken["delivered_via"] == "agentPrompts"
        assert taken["acked_at"] is not None
        assert not any("response_queued" in r for r in await rows(db, agent.pending_id))
        await agent.close()


async def test_a_held_channel_is_dispatched_to_as_before_and_nothing_is_queued(db: Database) -> None:
    async with resuming(db) as (svc, _):
        session_id, agent = await channel_session(svc)
        received: list[PromptRequest] = []

        async def runner() -> None:
            async with svc.prompts.hold(session_id) as prompts:
                async for request in prompts:
                    received.append(request)
                    await svc.prompts.acknowledge(request.turn_id, True)

        task = asyncio.create_task(runner())
        await channel_holder(svc, session_id)
        result = await answer(svc, agent)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert isinstance(result, lc.Responded)
        assert (result.resumed, result.queued) == (True, False)
        assert len(received) == 1
        assert await inbox_rows(db, session_id) == []
        await agent.close()


async def test_a_newer_turn_supersedes_a_queued_answer_which_is_never_delivered(db: Database) -> None:
    async with resuming(db) as (svc, _):
        session_id, agent = await channel_session(svc)
        await queued_answer(svc, agent)
        await svc.operations.start_turn(session_id)
        assert await first_prompts(svc, session_id) == []
        assert await svc.inbox.take(session_id, via="mcp", pending_id=agent.pending_id) == []
        (item,) = await inbox_rows(db, session_id)
        assert item["delivered_at"] is None
        assert item["closed_at"] is not None
        assert not any("response_queued" in r for r in await rows(db, agent.pending_id))
        await agent.close()


async def test_startup_recovery_closes_items_superseded_while_no_process_ran(db: Database) -> None:
    async with resuming(db) as (svc, _):
        session_id, agent = await channel_session(svc)
        await answer(svc, agent)
        await svc.operations.start_turn(session_id)
        await agent.close()
    async with resuming(db) as (restarted, _):
        await restarted.recovery.run()
        await restarted.inbox.recover()
        (item,) = await inbox_rows(db, session_id)
        assert item["closed_at"] is not None
        assert item["delivered_at"] is None
        assert not any("response_queued" in r for r in await rows(db, agent.pending_id))
        await restarted.recovery.run()  # idempotent: nothing left to close
        assert await inbox_rows(db, session_id) == [item]


async def test_an_executor_that_explicitly_refuses_keeps_the_answer_retryable(db: Database) -> None:
    async with resuming(db) as (svc, executor):
        assert isinstance(executor, ScriptedExecutor)
        executor.outcomes = ["rejected"]
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        result = await answer(svc, agent)
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is True
        assert await inbox_rows(db, session_id) == []
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        await agent.close()


async def test_the_watchdog_leaves_the_turn_of_an_agent_without_a_channel_alone(db: Database) -> None:
    async with resuming(db, watchdog_seconds=0.1) as (svc, _):
        svc.orchestrator.executor = svc.prompts  # an MCP agent: no runner holds the channel
        watches: list[Watch] = []
        svc.pending.primary_answer_notifier = lambda claim: watches.append(svc.watchdogs.armed(claim))
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        agent.wait()
        result = await answer(svc, agent)
        assert isinstance(result, lc.Responded)
        assert isinstance(await agent.outcome(), lc.Answered)
        (watch,) = watches
        await asyncio.wait_for(watch.done.wait(), 10)
        assert watch.outcome == "skipped:no runner"
        stored = {t["id"]: t for t in await turn_rows(db, session_id)}
        assert stored[agent.bundle.turn_id]["completed"] is False  # type: ignore[union-attr]
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == agent.bundle.turn_id  # type: ignore[union-attr]
        await agent.close()
