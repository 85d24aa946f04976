"""A newer accepted turn ends the older open ones, and the session state follows its questions."""

from __future__ import annotations

from backend.db.engine import Database
from backend.domain.lifecycle import Answered
from backend.repository import pending, tasks, turns
from backend.services.pending.core import trusted
from tests.lifecycle.support import Agent, new_session, running, yes
from tests.resume.support import detached_question, resuming


async def _state(db: Database, session_id: str) -> str:
    async with db.read() as conn:
        return (await tasks.get_session(conn, session_id)).state


async def test_a_newer_turn_ends_the_older_open_turn_so_it_never_owns_the_session_again(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc, turn=False)
        older = await svc.operations.start_turn(session_id)
        agent = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()  # detached and still answerable in the older turn
        newer = await svc.operations.start_turn(session_id)
        await svc.operations.complete_turn(newer.id)
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == newer.id
            assert (await turns.get_turn(conn, older.id)).completed_at == newer.started_at
            projection = (await pending.pending_for_sessions(conn, [session_id]))[session_id]
        assert projection.pending_action is None, "the older question must stay superseded"
        await agent.close()


async def test_a_lifecycle_turn_does_not_end_the_open_conversational_turn(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc, turn=False)
        conversational = await svc.operations.start_turn(session_id)
        await svc.operations.start_turn(session_id, lifecycle_only=True)
        async with db.read() as conn:
            assert (await turns.get_turn(conn, conversational.id)).completed_at is None
            assert await turns.current_turn(conn, session_id) == conversational.id


async def test_a_live_answer_returns_the_waiting_session_to_running(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        assert await _state(db, session_id) == "WAITING_FOR_INPUT"
        agent.wait()
        await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(await agent.outcome(), Answered)
        assert await _state(db, session_id) == "RUNNING"


async def test_a_session_keeps_waiting_while_another_question_is_active(db: Database) -> None:
    async with running(db) as svc:
        _, session_id = await new_session(svc)
        first = await Agent.ask(svc, session_id, timeout_seconds=0.05)
        await first.outcome()
        second = await Agent.ask(
            svc, session_id, [{"prompt": "Other?", "options": [{"label": "a"}, {"label": "b"}]}]
        )
        await svc.pending.respond(first.pending_id, [], rejected=True, authorize=trusted)
        assert await _state(db, session_id) == "WAITING_FOR_INPUT"
        await second.close()


async def test_a_resumed_detached_answer_ends_the_question_turn_and_the_session_runs(db: Database) -> None:
    async with resuming(db, ["accepted"]) as (svc, _):
        _, session_id = await new_session(svc)
        async with db.read() as conn:
            question_turn = await turns.current_turn(conn, session_id)
        agent = await detached_question(svc, session_id)
        outcome = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert getattr(outcome, "resumed", False) is True
        async with db.read() as conn:
            successor = await turns.current_turn(conn, session_id)
            assert successor != question_turn
            assert question_turn is not None
            assert (await turns.get_turn(conn, question_turn)).completed_at is not None
        assert await _state(db, session_id) == "RUNNING"
        await svc.operations.complete_turn(str(successor), str(successor))
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == successor
        await agent.close()
