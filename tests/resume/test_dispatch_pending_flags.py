"""`prompt_dispatch_pending` in every form the tolerant flag rule accepts: `true`, `"true"`, `"1"`, `1`.

Whatever its form, the flag makes a turn an unpublished reservation everywhere it is read: the one
rule (an empty, unattempted reservation is not turn authority), client turn history (hidden),
prompt admission and ready events (a live reservation of the session), the prompt channel's
acknowledgement (outstanding), and startup recovery (deleted, its claimed rows restored). Any other
value leaves an ordinary turn. SQL (`json_flag`, both dialects), the domain's `flag` and the web
app kit's `is_truthy` agree on every form.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from backend.db.engine import Database
from backend.db.sqlfuncs import json_flag
from backend.db.tables import task_session_turns as T
from backend.domain.clarification import flag
from backend.domain.lifecycle import BundleState
from backend.repository import locks, pending, reservations, turns
from backend.services.container import Services
from backend.services.pending.core import trusted
from frontend_py.kit import derivation
from tests.lifecycle.support import Agent, new_session, recording, rows
from tests.resume.support import detached_question, eventually, resuming, turn_rows
from tests.resume.test_recovery import strand

SET = [True, "true", "1", 1]
NOT_SET = [False, "false", 0, "0", "yes", "TRUE", 1.5, None]


def form_id(value: Any) -> str:
    return json.dumps(value)


async def stored_flag(db: Database, turn_id: str) -> tuple[Any, bool]:
    """The flag's stored JSON value (type included) and what the SQL flag test makes of it."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(T.c.metadata, json_flag(T.c.metadata, reservations.PENDING).label("set")).where(
                    T.c.id == turn_id
                )
            )
        ).one()
    metadata = row.metadata if isinstance(row.metadata, dict) else json.loads(row.metadata)
    return metadata[reservations.PENDING], bool(row.set)


async def turn_flagged(db: Database, session_id: str, value: Any) -> str:
    """A newer, empty turn of the session whose metadata holds only the flag, in this form."""
    async with db.write() as conn:
        await locks.lock_sessions(conn, [session_id])
        turn = await turns.insert_turn(conn, session_id, {reservations.PENDING: value})
    return turn.id


async def question_then_flagged_turn(svc: Services, db: Database, value: Any) -> tuple[str, Agent, str]:
    """A session with a detached question, then ``turn_flagged``: the session, the asking agent, the turn."""
    _, session_id = await new_session(svc)
    agent = await detached_question(svc, session_id)
    return session_id, agent, await turn_flagged(db, session_id, value)


async def assert_read_as(db: Database, turn_id: str, value: Any, expected: bool) -> None:
    """The flag keeps the form it was written in; SQL, the domain and the kit read it as ``expected``."""
    stored, sql_set = await stored_flag(db, turn_id)
    assert (stored, type(stored)) == (value, type(value))
    assert sql_set is expected
    assert flag(value) is expected
    assert derivation.is_truthy(value) is expected


@pytest.mark.parametrize("value", SET, ids=form_id)
async def test_every_set_form_makes_an_empty_turn_a_hidden_reservation_that_owns_nothing(
    db: Database, value: Any
) -> None:
    async with resuming(db) as (svc, _):
        session_id, agent, reserved = await question_then_flagged_turn(svc, db, value)
        await assert_read_as(db, reserved, value, True)
        async with db.read() as conn:
            # Not turn authority: the question's turn stays current and the question active.
            assert await turns.current_turn(conn, session_id) == agent.turn_id
            projection = (await pending.pending_for_sessions(conn, [session_id]))[session_id]
            assert projection.current_turn_id == agent.turn_id
            assert projection.pending_action == "clarification"
            # Hidden from client turn history.
            assert [t.id for t in await turns.visible_turns(conn, session_id)] == [agent.turn_id]
            # A live reservation: prompt admission and ready events wait for it.
            assert await reservations.live_reservation(conn, session_id) == reserved
        assert [t.id for t in await svc.reads.turns(session_id)] == [agent.turn_id]
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        # The runner's acknowledgement of it reaches whoever dispatched it.
        assert await svc.prompts.acknowledge(reserved, True) is True
        await agent.close()


@pytest.mark.parametrize("value", SET, ids=form_id)
@pytest.mark.scenario("S19")
async def test_startup_deletes_an_empty_unattempted_reservation_in_any_flag_form_and_restores_its_rows(
    db: Database, value: Any
) -> None:
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc)
        pending_id, reserved, claimed = await strand(
            svc, db, session_id, metadata={reservations.PENDING: value}
        )
    await assert_read_as(db, reserved, value, True)
    async with resuming(db) as (restarted, _):
        async with recording(restarted) as log:
            await restarted.recovery.run()
            await eventually(lambda: len(log.kinds("message.updated")) >= len(claimed))
        assert reserved not in {t["id"] for t in await turn_rows(db, session_id)}
        restored = await rows(db, pending_id)
        assert [r["status"] for r in restored] == ["pending"]
        assert not any("response" in r or "response_delivery_pending" in r for r in restored)
        bundle = await restarted.pending.bundle(pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED


@pytest.mark.parametrize("value", NOT_SET, ids=form_id)
async def test_any_other_value_leaves_an_ordinary_turn_that_supersedes_the_older_question(
    db: Database, value: Any
) -> None:
    async with resuming(db) as (svc, _):
        session_id, agent, newer = await question_then_flagged_turn(svc, db, value)
        await assert_read_as(db, newer, value, False)
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == newer
            assert [t.id for t in await turns.visible_turns(conn, session_id)] == [agent.turn_id, newer]
            assert await reservations.live_reservation(conn, session_id) is None
            projection = (await pending.pending_for_sessions(conn, [session_id]))[session_id]
            assert projection.pending_action is None
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.SUPERSEDED_HISTORY
        assert await svc.prompts.acknowledge(newer, True) is False
        # Startup recovery leaves it alone.
        before = await turn_rows(db, session_id)
        await svc.recovery.run()
        assert await turn_rows(db, session_id) == before
        await agent.close()
