"""Ask, wait, detach and respond through the service, on SQLite and PostgreSQL; the scenarios that hold
for every kind of pending action (S01, S15, S16, S22, S32) run for a question and a permission request
alike (the `kind` fixture)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.errors import InvalidInput
from backend.domain.lifecycle import Answer, BundleState, ConflictReason
from backend.domain.permissions import Decision
from backend.services.container import Services
from backend.services.pending.actions import TaskAdvanceBlocked
from backend.services.pending.core import trusted
from backend.services.resume import ResumeOutcome
from backend.services.uow import Work
from tests.lifecycle.support import (
    BASH,
    CLARIFICATION,
    PERMISSION,
    QUESTION,
    Agent,
    Kind,
    ScriptedResumer,
    all_metadata,
    new_session,
    questions,
    recording,
    rows,
    running,
    yes,
)
from tests.resume.support import resuming, turn_rows


async def live_agent(svc: Services) -> tuple[str, Agent]:
    """A new session and its agent, waiting live on one question."""
    _, session_id = await new_session(svc)
    agent = await Agent.ask(svc, session_id)
    agent.wait()
    return session_id, agent


async def detached_with_resumer(svc: Services) -> tuple[str, Agent, ScriptedResumer]:
    """A new session whose question's wait timed out, and the resumer (accepting) an answer would use."""
    _, session_id = await new_session(svc)
    resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
    svc.pending.resumer = resumer
    agent = await Agent.ask(svc, session_id, timeout_seconds=0.05)
    await agent.outcome()
    return session_id, agent, resumer


async def state_of(svc: Services, pending_id: str) -> BundleState:
    bundle = await svc.pending.bundle(pending_id, authorize=trusted)
    assert bundle is not None
    return bundle.state


async def test_ask_writes_one_row_per_question_sharing_a_new_pending_id_in_the_current_turn(
    db: Database,
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(3), context="refactor")
        bundle = agent.bundle
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_LIVE
        stored = await rows(db, agent.pending_id)
        assert [r["question_id"] for r in stored] == ["q1", "q2", "q3"]
        assert [o["id"] for o in stored[1]["question"]["options"]] == ["q2_opt1", "q2_opt2"]
        assert {r["status"] for r in stored} == {"pending"}
        assert [r["requests_input"] for r in stored] == [False, False, True]
        assert {bundle.turn_id} == {bundle.current_turn_id}
        assert (await svc.reads.session(session_id)).state == "WAITING_FOR_INPUT"
        await agent.close()


async def test_asking_in_a_session_without_a_turn_opens_its_first_turn(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc, turn=False)
        agent = await Agent.ask(svc, session_id)
        assert agent.bundle is not None
        assert agent.bundle.turn_id is not None
        assert [t.id for t in await svc.reads.turns(session_id)] == [agent.bundle.turn_id]
        await agent.close()


@pytest.mark.parametrize(
    ("qs", "context", "field"),
    [
        ([], None, "questions"),
        ([QUESTION] * 5, None, "questions"),
        ([{"prompt": "  ", "options": QUESTION["options"]}], None, "questions[0].prompt"),
        ([{"prompt": "x?", "options": [{"label": "only"}]}], None, "questions[0].options"),
        ([{"prompt": "x?", "options": [{"label": str(i)} for i in range(7)]}], None, "questions[0].options"),
        ([{**QUESTION, "id": "a"}, {**QUESTION, "id": "a"}], None, "questions[1].id"),
        (
            [{"prompt": "x?", "options": [{"id": "o", "label": "1"}, {"id": "o", "label": "2"}]}],
            None,
            "questions[0].options[1].id",
        ),
        ([{**QUESTION, "title": "far too long a title"}], None, "questions[0].title"),
        ([{**QUESTION, "prompt": "x" * 2001}], None, "questions[0].prompt"),
        ([QUESTION], "c" * 4001, "context"),
    ],
)
async def test_invalid_questions_get_an_error_naming_the_field_and_nothing_is_written(
    db: Database, qs: list[dict[str, Any]], context: str | None, field: str
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        before = await all_metadata(db)
        with pytest.raises(InvalidInput) as err:
            await Agent.ask(svc, session_id, qs or [], context=context)
        assert err.value.field == field
        assert await all_metadata(db) == before
        assert (await svc.reads.session(session_id)).state == "CREATED"


async def test_identical_questions_asked_again_while_active_reuse_the_bundle(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        first = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await first.outcome(), lc.Detached)
        again = await Agent.ask(svc, session_id)
        assert again.pending_id == first.pending_id
        assert again.bundle is not None
        assert again.bundle.state == BundleState.ACTIVE_LIVE
        other = await Agent.ask(svc, session_id, questions(1))
        assert other.pending_id != first.pending_id
        for a in (first, again, other):
            await a.close()


@pytest.mark.scenario("S22")
@pytest.mark.parametrize(
    ("kind", "count"),
    [(CLARIFICATION, 1), (CLARIFICATION, 2), (PERMISSION, 1)],
    indirect=["kind"],
    ids=["clarification-one-question", "clarification-two-questions", "permission"],
)
async def test_live_answer_is_durably_confirmed_before_the_agent_receives_it(
    db: Database, monkeypatch: pytest.MonkeyPatch, kind: Kind, count: int
) -> None:
    # One row (a question, a permission request) or two questions: the confirmation is a unit of
    # work, and it commits before the agent sees the answer (or the decision).
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, qs=questions(count))
        order: list[str] = []
        agent.wait().add_done_callback(lambda _: order.append("agent received the answer"))
        # Hold the waiter's confirmation write until the test lets it go.
        entered, release = asyncio.Event(), asyncio.Event()
        finalize = svc.pending.asking.finalize

        async def held(claim: lc.Claim) -> tuple[bool, Work]:
            entered.set()
            await release.wait()
            settled = await finalize(claim)
            order.append("confirmation committed")
            return settled

        monkeypatch.setattr(svc.pending.asking, "finalize", held)
        answers = [Answer("q1", ("q1_opt2",), None), Answer("q2", (), "neither")][:count]
        responding = asyncio.create_task(
            kind.answer(svc, agent.pending_id)
            if kind.is_permission
            else svc.pending.respond(agent.pending_id, answers, rejected=False, authorize=trusted)
        )
        await asyncio.wait_for(entered.wait(), 10)  # the hand-off reached the waiter
        claimed = await rows(db, agent.pending_id)
        assert len(claimed) == count
        assert {r["status"] for r in claimed} == {"answered"}
        assert all(r.get("response_delivery_pending") for r in claimed)
        await asyncio.sleep(0.1)  # the waiter holds the answer: it was enqueued, not confirmed
        assert order == []
        release.set()
        result = await responding
        assert isinstance(result, lc.Responded)
        assert result.resumed is False
        assert result.bundle.state == BundleState.TERMINAL
        outcome = await agent.outcome()
        assert order == ["confirmation committed", "agent received the answer"]
        assert isinstance(outcome, lc.Answered)
        if kind.is_permission:
            assert outcome.answers == (Decision("allow", BASH),)
        else:
            expected = {"q1": (("q1_opt2",), None), "q2": ((), "neither")}
            assert {
                a.question_id: (a.selected_option_ids, a.custom_text) for a in outcome.question_answers
            } == {q: expected[q] for q in list(expected)[:count]}
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"answered"}
        assert not any(r.get("response_delivery_pending") for r in stored)
        await agent.close()


async def test_skip_of_a_live_bundle_is_delivered_to_the_same_turn_waiter(db: Database) -> None:
    async with running(db) as svc:
        _, agent = await live_agent(svc)
        result = await svc.pending.respond(agent.pending_id, [], rejected=True, authorize=trusted)
        assert isinstance(result, lc.Responded)
        assert isinstance(await agent.outcome(), lc.Rejected)
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"rejected"}
        await agent.close()


@pytest.mark.scenario("S01")
async def test_wait_timeout_detaches_and_the_question_stays_answerable(db: Database, kind: Kind) -> None:
    """A question (or a permission request) whose wait runs out stays visible, answerable and
    blocking the workflow."""
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.pending.resumer = resumer
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await agent.outcome(), lc.Detached)
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_DETACHED
        assert {r["agent_disconnected"] for r in await rows(db, agent.pending_id)} == {True}
        # Visible: the session advertises it, and it is the session's active action of its kind.
        projection = (await svc.reads.pending_for_sessions([session_id]))[session_id]
        assert projection.pending_action == kind.value.value
        assert (await kind.active(svc, [session_id]))[session_id].pending_id == agent.pending_id
        summary = (await svc.summaries.refresh([task_id]))[task_id]
        assert summary.pending_action == kind.value.value
        blocked = await svc.pending.advance_task(task_id, "review", authorize=trusted)
        assert isinstance(blocked, TaskAdvanceBlocked)
        assert blocked.session_id == session_id
        assert (await svc.reads.task(task_id)).workflow_step == "todo"
        # Answerable: the late answer resumes the agent with exactly that answer.
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        result = await kind.answer(svc, agent.pending_id)
        assert isinstance(result, lc.Responded)
        assert result.resumed is True
        (claim,) = resumer.claims
        assert claim.answers == kind.answers(bundle)
        if kind.is_permission:
            assert claim.answers == (Decision("allow", BASH),)
        await agent.close()


async def test_repeated_detachment_is_a_semantic_no_op_without_a_duplicate_message_updated(
    db: Database,
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(2))
        async with recording(svc) as log:
            assert await svc.pending.detach_session(session_id) == 2
            assert await svc.pending.detach_session(session_id) == 0
            turn = (await svc.reads.turns(session_id))[-1]
            await svc.operations.complete_turn(turn.id)
        assert sorted(log.kinds("message.updated")) == sorted(
            r["id"] for r in await rows(db, agent.pending_id)
        )
        assert isinstance(await agent.outcome(), lc.Detached)
        await agent.close()


async def test_turn_teardown_detaches_the_live_bundle_and_tells_its_waiter(db: Database) -> None:
    async with running(db) as svc:
        session_id, agent = await live_agent(svc)
        turn = (await svc.reads.turns(session_id))[-1]
        await svc.operations.complete_turn(turn.id)
        assert isinstance(await agent.outcome(), lc.Detached)
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_DETACHED
        await agent.close()


async def test_detached_current_turn_rejection_persists_without_resuming(db: Database) -> None:
    async with running(db) as svc:
        _, agent, resumer = await detached_with_resumer(svc)
        result = await svc.pending.respond(agent.pending_id, [], rejected=True, authorize=trusted)
        assert isinstance(result, lc.Responded)
        assert result.resumed is False
        assert resumer.claims == []
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"rejected"}
        assert not any(r.get("response_delivery_pending") for r in stored)
        await agent.close()


@pytest.mark.scenario("S16")
async def test_detached_answer_not_accepted_by_the_resume_seam_keeps_the_question_answerable(
    db: Database, kind: Kind
) -> None:
    # The real resume path (orchestrator, reservation, dispatch) with an executor that refuses once.
    async with resuming(db, ["rejected", "accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        before = await turn_rows(db, session_id)
        async with recording(svc) as log:
            result = await kind.answer(svc, agent.pending_id)
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is True
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_DETACHED
        stored = await rows(db, agent.pending_id)
        assert [r["status"] for r in stored] == ["pending"]
        assert not any("response" in r or "response_delivery_pending" in r for r in stored)
        # The restored rows are published so other clients converge.
        assert log.kinds("message.updated") == [stored[0]["id"]]
        # The refused dispatch left no turn behind to supersede the bundle.
        assert await turn_rows(db, session_id) == before
        # A retry goes through the same seam and the agent gets exactly one accepted resume request.
        retry = await kind.answer(svc, agent.pending_id)
        assert isinstance(retry, lc.Responded)
        assert retry.resumed is True
        refused, accepted = executor.received
        assert refused.turn_id != accepted.turn_id
        assert accepted.pending_id == agent.pending_id
        assert kind.in_prompt() in accepted.prompt
        if kind.is_permission:
            assert "The user allowed it" in accepted.prompt
        turns_now = await turn_rows(db, session_id)
        assert [t["id"] for t in turns_now] == [before[0]["id"], accepted.turn_id]
        assert not any(k.startswith("prompt_dispatch_") for k in turns_now[1]["metadata"])
        answered = await rows(db, agent.pending_id)
        assert [(r["id"], r["status"]) for r in answered] == [(stored[0]["id"], "answered")]
        (answer,) = kind.answers(retry.bundle)
        assert answered[0]["response"] == answer.as_response()
        assert "response_delivery_pending" not in answered[0]
        await agent.close()


@pytest.mark.scenario("S15")
async def test_stale_browser_answer_gets_conflict_and_no_resume(db: Database, kind: Kind) -> None:
    """A stale browser's answer or skip (allow or deny) gets a conflict, writes nothing and resumes
    nobody."""
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.pending.resumer = resumer
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        await svc.operations.start_turn(session_id)
        before = await all_metadata(db)
        async with recording(svc) as log:
            for respond in (kind.answer, kind.skip_or_deny):
                result = await respond(svc, agent.pending_id)
                assert isinstance(result, lc.Conflict)
                assert result.reason == ConflictReason.SUPERSEDED
                assert result.bundle is not None
                assert result.bundle.state == BundleState.SUPERSEDED_HISTORY
        assert await all_metadata(db) == before
        assert log.events == []
        assert resumer.claims == []
        await agent.close()


async def test_response_to_a_terminal_bundle_is_a_conflict_carrying_the_winning_answer(db: Database) -> None:
    async with running(db) as svc:
        _, agent = await live_agent(svc)
        await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        await agent.outcome()
        before = await all_metadata(db)
        late = await svc.pending.respond(agent.pending_id, [], rejected=True, authorize=trusted)
        assert isinstance(late, lc.Conflict)
        assert late.reason == ConflictReason.TERMINAL
        assert late.bundle is not None
        assert late.bundle.rows[0].metadata["response"]["selected_option_ids"] == ["q1_opt1"]
        assert await all_metadata(db) == before
        await agent.close()


@pytest.mark.parametrize(
    ("answers", "field"),
    [
        ([Answer("q9", ("q9_opt1",), None), *yes("q2")], "answers[0].questionId"),
        ([Answer("q1", ("nope",), None), *yes("q2")], "answers[0].selectedOptionIds"),
        ([Answer("q1", ("q1_opt1", "q1_opt2"), None), *yes("q2")], "answers[0].selectedOptionIds"),
        (yes("q1"), "answers"),
        ([Answer("q1", (), "x" * 4001), *yes("q2")], "answers[0].customText"),
        ([Answer("q1", (), None), *yes("q2")], "answers[0]"),
        ([*yes("q1"), *yes("q1"), *yes("q2")], "answers[1].questionId"),
    ],
)
async def test_answers_are_validated_against_the_bundle_and_nothing_is_written(
    db: Database, answers: list[Answer], field: str
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(2))
        before = await all_metadata(db)
        with pytest.raises(InvalidInput) as err:
            await svc.pending.respond(agent.pending_id, answers, rejected=False, authorize=trusted)
        assert err.value.field == field
        assert await all_metadata(db) == before
        await agent.close()


async def test_multi_select_question_takes_several_options(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, [{**QUESTION, "multi_select": True}])
        agent.wait()
        result = await svc.pending.respond(
            agent.pending_id, [Answer("q1", ("q1_opt1", "q1_opt2"), None)], rejected=False, authorize=trusted
        )
        assert isinstance(result, lc.Responded)
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Answered)
        assert outcome.question_answers[0].selected_option_ids == (
            "q1_opt1",
            "q1_opt2",
        )
        await agent.close()


async def test_unknown_pending_id_is_not_found(db: Database) -> None:
    from backend.domain.errors import NotFound

    async with running(db) as svc:
        with pytest.raises(NotFound):
            await svc.pending.respond("no-such", [], rejected=True, authorize=trusted)
        assert await svc.pending.bundle("no-such", authorize=trusted) is None
        assert await svc.pending.cancel("no-such", authorize=trusted) is False


@pytest.mark.scenario("S32")
async def test_a_cancelled_request_still_detaches_in_a_fresh_bounded_context(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id)
        waiting = agent.wait()
        await asyncio.sleep(0.05)
        waiting.cancel()  # the transport went away mid-wait
        with pytest.raises(asyncio.CancelledError):
            await waiting
        for _ in range(100):
            if {r["agent_disconnected"] for r in await rows(db, agent.pending_id)} == {True}:
                break
            await asyncio.sleep(0.02)
        assert await state_of(svc, agent.pending_id) == BundleState.ACTIVE_DETACHED
        await agent.stream.aclose()
