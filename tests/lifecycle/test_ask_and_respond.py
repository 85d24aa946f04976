"""Ask, wait, detach and respond through the service, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.errors import InvalidInput
from backend.domain.lifecycle import Answer, BundleState, ConflictReason
from backend.executors.scripted import ScriptedExecutor
from backend.repository import clarifications as repo
from backend.repository import locks
from backend.services.resume import ResumeOutcome
from tests.lifecycle.support import (
    QUESTION,
    Agent,
    ScriptedResumer,
    all_metadata,
    new_session,
    questions,
    recording,
    rows,
    running,
    yes,
)


async def test_ask_writes_one_row_per_question_sharing_a_new_pending_id_in_the_current_turn(
    db: Database,
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(3), context="refactor")
        bundle = agent.bundle
        assert bundle is not None and bundle.state == BundleState.ACTIVE_LIVE
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
        assert agent.bundle is not None and agent.bundle.turn_id is not None
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
            await Agent.ask(svc, session_id, qs or [], context=context)  # type: ignore[arg-type]
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
        assert again.bundle is not None and again.bundle.state == BundleState.ACTIVE_LIVE
        other = await Agent.ask(svc, session_id, questions(1))
        assert other.pending_id != first.pending_id
        for a in (first, again, other):
            await a.close()


async def test_live_answer_is_durably_confirmed_before_the_agent_receives_it(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(2))
        agent.wait()
        answers = [Answer("q1", ("q1_opt2",), None), Answer("q2", (), "neither")]
        result = await svc.clarifications.respond(agent.pending_id, answers, rejected=False)
        assert isinstance(result, lc.Responded) and result.resumed is False
        assert result.bundle.state == BundleState.TERMINAL
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Answered)
        assert {a.question_id: (a.selected_option_ids, a.custom_text) for a in outcome.answers} == {
            "q1": (("q1_opt2",), None),
            "q2": ((), "neither"),
        }
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"answered"}
        assert not any(r.get("response_delivery_pending") for r in stored)
        await agent.close()


async def test_skip_of_a_live_bundle_is_delivered_to_the_same_turn_waiter(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        agent.wait()
        result = await svc.clarifications.respond(agent.pending_id, [], rejected=True)
        assert isinstance(result, lc.Responded)
        assert isinstance(await agent.outcome(), lc.Rejected)
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"rejected"}
        await agent.close()


async def test_wait_timeout_detaches_and_the_question_stays_answerable(db: Database) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        assert isinstance(await agent.outcome(), lc.Detached)
        bundle = await svc.clarifications.bundle(agent.pending_id)
        assert bundle is not None and bundle.state == BundleState.ACTIVE_DETACHED
        assert {r["agent_disconnected"] for r in await rows(db, agent.pending_id)} == {True}
        projection = (await svc.reads.pending_for_sessions([session_id]))[session_id]
        assert projection.pending_action == "clarification"
        assert (
            await svc.clarifications.advance_task(task_id, "review")
        ).__class__.__name__ == "TaskAdvanceBlocked"
        await agent.close()


async def test_repeated_detachment_is_a_semantic_no_op_without_a_duplicate_message_updated(
    db: Database,
) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, questions(2))
        async with recording(svc) as log:
            assert await svc.clarifications.detach_session(session_id) == 2
            assert await svc.clarifications.detach_session(session_id) == 0
            turn = (await svc.reads.turns(session_id))[-1]
            await svc.operations.complete_turn(turn.id)
        assert sorted(log.kinds("message.updated")) == sorted(
            r["id"] for r in await rows(db, agent.pending_id)
        )
        assert isinstance(await agent.outcome(), lc.Detached)
        await agent.close()


async def test_turn_teardown_detaches_the_live_bundle_and_tells_its_waiter(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        agent.wait()
        turn = (await svc.reads.turns(session_id))[-1]
        await svc.operations.complete_turn(turn.id)
        assert isinstance(await agent.outcome(), lc.Detached)
        bundle = await svc.clarifications.bundle(agent.pending_id)
        assert bundle is not None and bundle.state == BundleState.ACTIVE_DETACHED
        await agent.close()


async def test_detached_current_turn_rejection_persists_without_resuming(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.clarifications.resumer = resumer
        agent = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        result = await svc.clarifications.respond(agent.pending_id, [], rejected=True)
        assert isinstance(result, lc.Responded) and result.resumed is False
        assert resumer.claims == []
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"rejected"}
        assert not any(r.get("response_delivery_pending") for r in stored)
        await agent.close()


async def test_detached_answer_not_accepted_by_the_resume_seam_keeps_the_question_answerable(
    db: Database,
) -> None:
    async with running(db) as svc:
        # An executor that explicitly refuses (S16); with no agent at all the answer would be queued.
        svc.orchestrator.executor = ScriptedExecutor(["rejected"])
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        async with recording(svc) as log:
            result = await svc.clarifications.respond(agent.pending_id, yes("q1"), rejected=False)
        assert isinstance(result, lc.DeliveryFailed) and result.retryable is True
        bundle = await svc.clarifications.bundle(agent.pending_id)
        assert bundle is not None and bundle.state == BundleState.ACTIVE_DETACHED
        stored = await rows(db, agent.pending_id)
        assert {r["status"] for r in stored} == {"pending"}
        assert not any("response" in r or "response_delivery_pending" in r for r in stored)
        # The restored rows are published so other clients converge.
        assert log.kinds("message.updated") == [stored[0]["id"]]
        # A retry goes through the seam again and succeeds exactly once.
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))

        async def accept(claim: lc.Claim) -> ResumeOutcome:
            async with db.write() as conn:
                await locks.lock_sessions(conn, [claim.session_id])
                await repo.settle_claim(conn, claim.message_ids, claim.claim_id)
            return await ScriptedResumer.resume(resumer, claim)

        resumer.resume = accept  # type: ignore[method-assign]
        svc.clarifications.resumer = resumer
        retry = await svc.clarifications.respond(agent.pending_id, yes("q1"), rejected=False)
        assert isinstance(retry, lc.Responded) and retry.resumed is True
        assert len(resumer.claims) == 1
        claim = resumer.claims[0]
        assert (claim.pending_id, claim.session_id, claim.turn_id) == (
            agent.pending_id,
            session_id,
            agent.bundle.turn_id if agent.bundle else None,
        )
        assert claim.message_ids == (stored[0]["id"],)
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"answered"}
        await agent.close()


async def test_stale_browser_answer_gets_conflict_and_no_resume(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        resumer = ScriptedResumer(ResumeOutcome(accepted=True, retryable=False))
        svc.clarifications.resumer = resumer
        agent = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        await svc.operations.start_turn(session_id)
        before = await all_metadata(db)
        async with recording(svc) as log:
            for rejected in (False, True):
                result = await svc.clarifications.respond(
                    agent.pending_id, [] if rejected else yes("q1"), rejected=rejected
                )
                assert isinstance(result, lc.Conflict) and result.reason == ConflictReason.SUPERSEDED
                assert result.bundle is not None and result.bundle.state == BundleState.SUPERSEDED_HISTORY
        assert await all_metadata(db) == before
        assert log.events == [] and resumer.claims == []
        await agent.close()


async def test_response_to_a_terminal_bundle_is_a_conflict_carrying_the_winning_answer(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        agent.wait()
        await svc.clarifications.respond(agent.pending_id, yes("q1"), rejected=False)
        await agent.outcome()
        before = await all_metadata(db)
        late = await svc.clarifications.respond(agent.pending_id, [], rejected=True)
        assert isinstance(late, lc.Conflict) and late.reason == ConflictReason.TERMINAL
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
            await svc.clarifications.respond(agent.pending_id, answers, rejected=False)
        assert err.value.field == field
        assert await all_metadata(db) == before
        await agent.close()


async def test_multi_select_question_takes_several_options(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id, [{**QUESTION, "multi_select": True}])
        agent.wait()
        result = await svc.clarifications.respond(
            agent.pending_id, [Answer("q1", ("q1_opt1", "q1_opt2"), None)], rejected=False
        )
        assert isinstance(result, lc.Responded)
        outcome = await agent.outcome()
        assert isinstance(outcome, lc.Answered) and outcome.answers[0].selected_option_ids == (
            "q1_opt1",
            "q1_opt2",
        )
        await agent.close()


async def test_unknown_pending_id_is_not_found(db: Database) -> None:
    from backend.domain.errors import NotFound

    async with running(db) as svc:
        with pytest.raises(NotFound):
            await svc.clarifications.respond("no-such", [], rejected=True)
        assert await svc.clarifications.bundle("no-such") is None
        assert await svc.clarifications.cancel("no-such") is False


async def test_a_cancelled_request_still_detaches_in_a_fresh_bounded_context(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        waiting = agent.wait()
        await asyncio.sleep(0.05)
        waiting.cancel()  # the transport went away mid-wait
        with pytest.raises(asyncio.CancelledError):
            await waiting
        for _ in range(100):
            if {r["agent_disconnected"] for r in await rows(db, agent.pending_id)} == {True}:
                break
            await asyncio.sleep(0.02)
        bundle = await svc.clarifications.bundle(agent.pending_id)
        assert bundle is not None and bundle.state == BundleState.ACTIVE_DETACHED
        await agent.stream.aclose()
