"""Which sessions' pending sequence the open transaction's writes have already bumped.

Every write that can change a session's projection bumps its `pending_seq` once per transaction. The
unit of work (`services/uow.py`) does it at commit, in one statement for every session it touched. A
write that changes the session row anyway (its state, say) may bump it in the same statement and
spare that one (`bump=True` on `tasks.set_session_state`, `tasks.mark_running_when_unblocked`,
`claims.claim`, `claims.settle_claim_and_resume`, `clarifications.insert_bundle`, and the ask's
combined statement). Each such write notes here, on its connection, the session it bumped; the unit
takes the notes at commit, treats those sessions as touched, and bumps only the rest. So no caller
tells the unit what a write did: a session is bumped exactly once whichever form the write took.

The notes live in the connection's `info` (SQLAlchemy's per-connection dictionary for user state),
which outlives one checkout: the unit clears them when it opens.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

_KEY = "turnwise.bumped"


def note(conn: AsyncConnection, session_id: str) -> None:
    """This transaction's last write bumped the session's sequence itself."""
    conn.info.setdefault(_KEY, set()).add(session_id)


def taken(conn: AsyncConnection) -> set[str]:
    """The sessions noted since the last call (and none noted any more)."""
    found: set[str] | None = conn.info.pop(_KEY, None)
    return found or set()
