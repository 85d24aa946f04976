"""The turn a new row of a session belongs to, decided once for every writer of one (a question, a
permission request, a rule's decision, a posted message): a session that ended takes nothing new,
and a session without a turn gets its first one, opened here and announced like any other."""

from __future__ import annotations

from backend.domain.errors import InvalidState
from backend.domain.events import EventKind
from backend.domain.records import SessionRecord
from backend.domain.states import TERMINAL_SESSION_STATES
from backend.repository import tasks, turns
from backend.services.uow import Work


async def turn_for_new_rows(w: Work, session: SessionRecord, turn_id: str | None, what: str) -> str:
    """`turn_id` (the session's current turn, as the caller read it in this unit), or the session's
    first turn; InvalidState for a session that ended, which takes no new `what`."""
    if session.state in TERMINAL_SESSION_STATES:
        raise InvalidState(f"session {session.id!r} is {session.state}; it takes no new {what}")
    if turn_id is None:
        turn_id = (await turns.insert_turn(w.conn, session.id)).id
        w.publish(session.task_id, session.id, EventKind.TURN_STARTED, turn_id=turn_id)
    return turn_id


async def session_and_turn(w: Work, session_id: str, what: str) -> tuple[SessionRecord, str]:
    """The session and the turn its new rows belong to, read in the unit (`turn_for_new_rows`)."""
    session = await tasks.get_session(w.conn, session_id)
    turn_id = await turns.current_turn(w.conn, session_id)
    return session, await turn_for_new_rows(w, session, turn_id, what)
