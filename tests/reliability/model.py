"""A small reference model of the spec's clarification rules, written independently of backend/.

It knows turns, bundles (one row per question), plain and permission messages, and sessions, and
answers the questions the model-based test asks after every step: which turn is current, which state
each bundle is in, what each session's pending projection is, what a respond must return, which
dispatch the executor must receive, and how each waiting agent's stream must end.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

TERMINAL_SESSION = frozenset({"COMPLETED", "FAILED", "CANCELLED"})

ACTIVE_LIVE = "active_live"
ACTIVE_DETACHED = "active_detached"
TERMINAL = "terminal"
SUPERSEDED = "superseded_history"
GONE = "gone"


@dataclass
class MTurn:
    id: str
    lifecycle_only: bool = False
    completed: bool = False


@dataclass
class MBundle:
    pending_id: str
    session_id: str
    turn_id: str
    # question id -> status (pending | answered | rejected | cancelled | expired); deleted rows removed
    rows: dict[str, str]
    row_ids: dict[str, str]
    # The agent whose stream still waits on this bundle (in the current server process), if any.
    agent: int | None = None
    # question id -> the row's `agent_disconnected` flag: set when the bundle detaches from its
    # waiter while active (disconnect, turn teardown, a dead process, a detached answer or skip),
    # never cleared here (the model never re-attaches), untouched by supersession and expiry.
    disconnected: dict[str, bool] = field(default_factory=dict)

    @property
    def pending(self) -> list[str]:
        return [q for q, s in self.rows.items() if s == "pending"]


@dataclass
class MSession:
    id: str
    state: str = "CREATED"
    turns: list[MTurn] = field(default_factory=list)
    # message id -> (kind, turn id); kind: message | permission_request
    messages: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_SESSION

    def current_turn(self) -> str | None:
        """The spec's rule: conversational turns only; an open one before any completed one, then the
        newest (turns here are created in strictly increasing start order)."""
        conversational = [t for t in self.turns if not t.lifecycle_only]
        open_turns = [t for t in conversational if not t.completed]
        pool = open_turns or conversational
        return pool[-1].id if pool else None

    def turn(self, turn_id: str) -> MTurn:
        return next(t for t in self.turns if t.id == turn_id)


@dataclass
class Expected:
    """How a waiting agent's stream must end: kind (answered | rejected | detached | closed) + detail."""

    kind: str
    detail: object = None


@dataclass
class Model:
    sessions: dict[str, MSession] = field(default_factory=dict)
    bundles: dict[str, MBundle] = field(default_factory=dict)
    # Dispatches the executor must have received, in order: (pending_id, outcome).
    dispatches: list[tuple[str, str]] = field(default_factory=list)
    # How each answered bundle reached its agent: pending_id -> "live" | "resume" | "ambiguous".
    deliveries: dict[str, str] = field(default_factory=dict)
    # Agents (by number) whose stream must have ended, and how.
    expected: dict[int, Expected] = field(default_factory=dict)

    # --- derivations ----------------------------------------------------------------------------

    def state(self, pending_id: str) -> str:
        b = self.bundles[pending_id]
        if not b.rows:
            return GONE
        session = self.sessions[b.session_id]
        pending = b.pending
        if pending and b.turn_id != session.current_turn():
            return SUPERSEDED
        if not pending or session.terminal:
            return TERMINAL
        return ACTIVE_LIVE if b.agent is not None else ACTIVE_DETACHED

    def pending_action(self, session_id: str) -> str | None:
        session = self.sessions[session_id]
        if session.terminal:
            return None
        current = session.current_turn()
        for b in self.bundles.values():
            if b.session_id == session_id and b.turn_id == current and b.pending:
                return "clarification"
        for kind, turn_id in session.messages.values():
            if kind == "permission_request" and turn_id == current:
                return "permission"
        return None

    def bundles_in(self, session_id: str) -> list[MBundle]:
        return [b for b in self.bundles.values() if b.session_id == session_id]

    # --- transitions ----------------------------------------------------------------------------

    def release_agents(self) -> None:
        """A waiter whose bundle is no longer live (by the rule, seen with its own waiter alive) ends:
        closed when the bundle is terminal, gone or superseded by a newer turn (its rows stay pending),
        detached otherwise."""
        for b in self.bundles.values():
            if b.agent is None:
                continue
            state = self.state(b.pending_id)
            if state == ACTIVE_LIVE:
                continue
            agent, b.agent = b.agent, None
            if agent in self.expected:
                continue
            if state == GONE:
                self.expected[agent] = Expected("closed", "cancelled")
            elif state == TERMINAL:
                statuses = Counter(s for s in b.rows.values() if s != "pending")
                self.expected[agent] = Expected("closed", statuses.most_common(1)[0][0])
            elif state == SUPERSEDED:
                self.expected[agent] = Expected("closed", "pending")
            else:
                self.expected[agent] = Expected("detached")

    def end_agent(self, b: MBundle, expected: Expected) -> None:
        assert b.agent is not None
        self.expected[b.agent] = expected
        b.agent = None

    def detach_current(self, session_id: str, turn_id: str | None = None) -> None:
        """Turn teardown / disconnect: live questions of the current turn lose their waiter, and every
        pending row of that turn is marked disconnected while the session is live."""
        session = self.sessions[session_id]
        current = session.current_turn()
        if turn_id is not None and turn_id != current:
            return
        for b in self.bundles_in(session_id):
            if b.turn_id == current and not session.terminal:
                self.mark_disconnected(b)
            if b.turn_id == current and b.pending and b.agent is not None:
                self.end_agent(b, Expected("detached"))

    def mark_disconnected(self, b: MBundle) -> None:
        for q in b.pending:
            b.disconnected[q] = True

    def detach_orphans(self) -> None:
        """Startup recovery after a restart: active rows whose waiter died with the old process."""
        for b in self.bundles.values():
            session = self.sessions[b.session_id]
            if not session.terminal and b.turn_id == session.current_turn():
                self.mark_disconnected(b)

    def accept_turn(self, session_id: str, turn_id: str, *, lifecycle_only: bool = False) -> None:
        """A newer turn is accepted; a conversational one ends every older open conversational turn, so
        an older turn can never outrank it again once it completes."""
        session = self.sessions[session_id]
        if not lifecycle_only:
            for t in session.turns:
                if not t.lifecycle_only:
                    t.completed = True
        session.turns.append(MTurn(turn_id, lifecycle_only=lifecycle_only))
        self.release_agents()

    def expire_current(self, session_id: str) -> None:
        current = self.sessions[session_id].current_turn()
        for b in self.bundles_in(session_id):
            if b.turn_id == current:
                for q in b.pending:
                    b.rows[q] = "expired"
