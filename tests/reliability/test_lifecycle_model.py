"""Model-based test: random lifecycle sequences against the reference model in tests/reliability/model.py.

Each example drives the real services (in-process, built and started exactly as `turnwise serve`
does, through the application's lifespan) over a real database, with the scripted executor; after
every step the per-session projections (pending action, current turn, revision), every bundle's state,
row statuses and `agent_disconnected` flags, the executor's dispatch log and every agent's stream must
match the model, and the exactly-once invariants must hold: no answer lost, none delivered twice,
revisions never decrease.

Runs in `make test` on SQLite and on PostgreSQL, as many examples on each. Derandomized, so CI sees the
same sequences every run; a failure prints the shrunk step sequence and its reproduction blob.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from backend.api.app import create_app
from backend.config import Settings
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.clarification import flag
from backend.domain.errors import InvalidInput, InvalidState, NotFound
from backend.domain.states import SessionState
from backend.services.container import Services
from backend.services.pending.core import trusted
from tests.conftest import wipe
from tests.reliability.model import (
    ACTIVE_DETACHED,
    ACTIVE_LIVE,
    GONE,
    SUPERSEDED,
    TERMINAL,
    Expected,
    MBundle,
    Model,
    MSession,
    MTurn,
)

T = TypeVar("T")

# PostgreSQL runs at least as many examples as SQLite: its locking and JSON SQL differ the most.
EXAMPLES = {"sqlite": 16, "postgresql": 16}
STEPS = 30
PICK = st.integers(min_value=0, max_value=1_000)
# Operation weights: questions and answers dominate; ends of sessions and restarts are rarer.
OPERATIONS = (
    ["ask"] * 3
    + ["answer"] * 4
    + ["skip", "incomplete", "cancel", "disconnect"]
    + ["start", "start", "lifecycle", "complete", "complete"]
    + ["message", "permission_request", "delete"]
    + ["new_session", "running", "terminal", "restart"]
)


def _settings(url: str, log_path: Path) -> Settings:
    return Settings(
        database_url=url,
        broadcast_url="memory://",
        executor="scripted",
        scripted_log=str(log_path),
        # Waits never time out and the watchdog never fires inside an example: every detach and every
        # dispatch in the log comes from a step the model knows about.
        max_wait_seconds=3600.0,
        watchdog_seconds=3600.0,
        live_confirmation_seconds=5.0,
        persistence_seconds=5.0,
        dispatch_seconds=2.0,
    )


@dataclass
class AgentRun:
    number: int
    pending_id: str
    stream: Any
    task: asyncio.Task[lc.WaitOutcome]
    checked: bool = False
    zombie: bool = False  # its server process is gone: the stream can never end


class Harness:
    """One event loop for the whole test, one `turnwise serve`-like runtime per server generation."""

    def __init__(self, url: str, log_path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.url = url
        self.log_path = log_path
        self.admin = Database(url)
        self.services: Services | None = None
        self._lifespan: Any = None
        self._old_dbs: list[Database] = []

    def run(self, work: Awaitable[T], seconds: float = 30.0) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(work, seconds))

    async def start(self) -> Services:
        app = create_app(_settings(self.url, self.log_path), auto_migrate=False)
        self._lifespan = app.router.lifespan_context(app)
        await self._lifespan.__aenter__()
        self.services = app.state.runtime.services
        return self.services

    async def stop(self) -> None:
        if self._lifespan is not None:
            assert self.services is not None
            self._old_dbs.append(self.services.deps.db)
            await self._lifespan.__aexit__(None, None, None)
        self._lifespan = None
        self.services = None

    async def dispose_old(self) -> None:
        for db in self._old_dbs:
            await db.dispose()
        self._old_dbs.clear()

    def close(self) -> None:
        self.run(self.admin.dispose())
        self.loop.close()


def _outcome_matches(outcome: lc.WaitOutcome, expected: Expected) -> bool:
    if expected.kind == "answered":
        return isinstance(outcome, lc.Answered) and tuple(outcome.answers) == expected.detail
    if expected.kind == "rejected":
        return isinstance(outcome, lc.Rejected)
    if expected.kind == "detached":
        return isinstance(outcome, lc.Detached)
    return isinstance(outcome, lc.Closed) and outcome.status == expected.detail


def make_machine(harness: Harness) -> type[RuleBasedStateMachine]:
    class LifecycleMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.h = harness
            self.h.run(self._reset())
            self.model = Model()
            self.task_id = self.h.run(self.svc.operations.create_task("model")).id
            self.agents: list[AgentRun] = []
            self.revisions: dict[str, tuple[tuple[int, int], str | None]] = {}
            self.live_deliveries: list[str] = []
            self.counter = 0
            self.restarts = 0
            self._new_session()

        async def _reset(self) -> None:
            await wipe(self.h.admin)
            self.h.log_path.write_text("")
            await self.h.start()

        @property
        def svc(self) -> Services:
            assert self.h.services is not None
            return self.h.services

        def teardown(self) -> None:
            async def down() -> None:
                for a in self.agents:
                    if not a.task.done():
                        a.task.cancel()
                    with contextlib.suppress(BaseException):
                        await a.task
                    with contextlib.suppress(BaseException):
                        await a.stream.aclose()
                await self.h.stop()
                await self.h.dispose_old()

            self.h.run(down())

        # --- helpers ----------------------------------------------------------------------------

        def _new_session(self) -> None:
            record = self.h.run(
                self.svc.operations.create_session(self.task_id, is_primary=False, input_capable=True)
            )
            self.model.sessions[record.id] = MSession(record.id)

        def _session(self, pick: int) -> MSession:
            sessions = list(self.model.sessions.values())
            return sessions[pick % len(sessions)]

        def _bundle(self, pick: int, active: bool) -> MBundle:
            """Any known bundle (stale ones must conflict), or when `active`, preferably an active one."""
            bundles = list(self.model.bundles.values())
            if active:
                live = [
                    b for b in bundles if self.model.state(b.pending_id) in (ACTIVE_LIVE, ACTIVE_DETACHED)
                ]
                bundles = live or bundles
            return bundles[pick % len(bundles)]

        def _dispatch_log(self) -> list[dict[str, Any]]:
            text = self.h.log_path.read_text()
            return [json.loads(line) for line in text.splitlines() if line.strip()]

        def _answers(self, b: MBundle, choices: list[int]) -> tuple[lc.Answer, ...]:
            out = []
            for i, q in enumerate(sorted(b.pending)):
                option = 1 + choices[i % len(choices)] % 2
                out.append(lc.Answer(q, (f"{q}_opt{option}",), "why not" if option == 2 else None))
            return tuple(out)

        def _expect_error(self, work: Awaitable[Any], error: type[Exception]) -> None:
            with pytest.raises(error):
                self.h.run(work)

        @initialize(n=st.integers(min_value=1, max_value=3))
        def first_question(self, n: int) -> None:
            self.ask(0, n)

        # --- rules ------------------------------------------------------------------------------

        def start_turn(self, pick: int, lifecycle_only: bool) -> None:
            s = self._session(pick)
            if s.terminal:
                self._expect_error(
                    self.svc.operations.start_turn(s.id, lifecycle_only=lifecycle_only), InvalidState
                )
                return
            turn = self.h.run(self.svc.operations.start_turn(s.id, lifecycle_only=lifecycle_only))
            self.model.accept_turn(s.id, turn.id, lifecycle_only=lifecycle_only)

        def complete_turn(self, pick: int, turn_pick: int) -> None:
            s = self._session(pick)
            open_turns = [t for t in s.turns if not t.completed]
            if not open_turns:
                return
            turn = open_turns[turn_pick % len(open_turns)]
            self.h.run(self.svc.operations.complete_turn(turn.id))
            self.model.detach_current(s.id, turn.id)
            turn.completed = True
            self.model.release_agents()

        # One rule with weighted operations rather than one rule per operation: Hypothesis enables a
        # random subset of rules per example (swarm testing), which would leave many examples without
        # questions or answers; the weights keep every example busy with both.
        @rule(
            op=st.sampled_from(OPERATIONS),
            pick=PICK,
            other=PICK,
            n=st.integers(min_value=1, max_value=3),
            active=st.sampled_from([True, True, True, False]),
            choices=st.lists(PICK, min_size=1, max_size=3),
            outcome=st.sampled_from(["accepted", "accepted", "rejected", "ambiguous"]),
        )
        def step(
            self, op: str, pick: int, other: int, n: int, active: bool, choices: list[int], outcome: str
        ) -> None:
            if op == "ask":
                self.ask(pick, n)
            elif op == "disconnect":
                self.disconnect(pick)
            elif op in ("answer", "skip", "incomplete", "cancel") and not self.model.bundles:
                return
            elif op == "answer":
                self.answer(pick, active, choices, outcome)
            elif op == "skip":
                self.skip(pick, active)
            elif op == "incomplete":
                self.answer_missing_a_question(pick, active)
            elif op == "cancel":
                self.cancel(pick, active)
            elif op in ("start", "lifecycle"):
                self.start_turn(pick, op == "lifecycle")
            elif op == "complete":
                self.complete_turn(pick, other)
            elif op in ("message", "permission_request"):
                self.post(pick, op)
            elif op == "delete":
                self.delete_message(pick)
            elif op == "new_session":
                if len(self.model.sessions) < 3:
                    self._new_session()
            elif op == "running":
                self.set_state(pick, "RUNNING")
            elif op == "terminal":
                self.set_state(pick, ("COMPLETED", "FAILED", "CANCELLED")[other % 3])
            elif op == "restart" and self.restarts < 2:
                self.restart()

        def ask(self, pick: int, n: int) -> None:
            s = self._session(pick)
            self.counter += 1
            questions = [
                {"prompt": f"Question {self.counter}.{i}?", "options": [{"label": "yes"}, {"label": "no"}]}
                for i in range(n)
            ]
            stream = self.svc.pending.ask(s.id, questions, None)
            if s.terminal:
                self._expect_error(stream.__anext__(), InvalidState)
                return
            asked = self.h.run(stream.__anext__())
            assert isinstance(asked, lc.Asked)
            bundle = asked.bundle
            current = s.current_turn()
            if current is None:
                s.turns.append(MTurn(bundle.turn_id or ""))
            else:
                assert bundle.turn_id == current, "a question belongs to the current turn"
            s.state = SessionState.WAITING_FOR_INPUT.value
            number = len(self.agents)
            task = self.h.loop.create_task(stream.__anext__())
            self.agents.append(AgentRun(number, bundle.pending_id, stream, task))
            self.model.bundles[bundle.pending_id] = MBundle(
                bundle.pending_id,
                s.id,
                bundle.turn_id or "",
                {r.question_id: "pending" for r in bundle.rows},
                {r.question_id: r.id for r in bundle.rows},
                agent=number,
                disconnected={r.question_id: False for r in bundle.rows},
            )

        def disconnect(self, pick: int) -> None:
            """The agent's wait ends from its side (timeout or dropped connection): the bundle detaches."""
            waiting = [b for b in self.model.bundles.values() if b.agent is not None]
            if not waiting:
                return
            b = waiting[pick % len(waiting)]
            run = self.agents[b.agent]  # type: ignore[index]
            b.agent = None
            self.model.mark_disconnected(b)
            run.checked = True

            async def close() -> None:
                run.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run.task
                await run.stream.aclose()

            self.h.run(close())

        def answer(self, pick: int, active: bool, choices: list[int], outcome: str) -> None:
            b = self._bundle(pick, active)
            state = self.model.state(b.pending_id)
            answers = self._answers(b, choices)
            executor = self.svc.orchestrator.executor
            executor.outcomes = [outcome]  # type: ignore[attr-defined]
            respond = self.svc.pending.respond(b.pending_id, answers, rejected=False, authorize=trusted)
            if state == GONE:
                self._expect_error(respond, NotFound)
                return
            result = self.h.run(respond)
            if state in (SUPERSEDED, TERMINAL):
                assert isinstance(result, lc.Conflict), result
                assert result.reason == (
                    lc.ConflictReason.SUPERSEDED if state == SUPERSEDED else lc.ConflictReason.TERMINAL
                )
                return
            if state == ACTIVE_LIVE:
                assert isinstance(result, lc.Responded), result
                assert result.resumed is False, result
                for q in b.pending:
                    b.rows[q] = "answered"
                self.model.end_agent(
                    b, Expected("answered", tuple(sorted(answers, key=lambda a: a.question_id)))
                )
                self.model.deliveries[b.pending_id] = "live"
                return
            assert state == ACTIVE_DETACHED
            self.model.mark_disconnected(b)
            self.model.dispatches.append((b.pending_id, outcome))
            if outcome == "rejected":
                assert isinstance(result, lc.DeliveryFailed), result
                assert result.retryable is True, result
                return
            if outcome == "accepted":
                assert isinstance(result, lc.Responded), result
                assert result.resumed is True, result
            else:
                assert isinstance(result, lc.DeliveryFailed), result
                assert result.retryable is False, result
            for q in b.pending:
                b.rows[q] = "answered"
            self.model.deliveries[b.pending_id] = "resume" if outcome == "accepted" else "ambiguous"
            # The successor the resume reserved is now the session's current, open turn.
            self.model.accept_turn(b.session_id, self._dispatch_log()[-1]["turn_id"])

        def skip(self, pick: int, active: bool) -> None:
            b = self._bundle(pick, active)
            state = self.model.state(b.pending_id)
            respond = self.svc.pending.respond(b.pending_id, [], rejected=True, authorize=trusted)
            if state == GONE:
                self._expect_error(respond, NotFound)
                return
            result = self.h.run(respond)
            if state in (SUPERSEDED, TERMINAL):
                assert isinstance(result, lc.Conflict), result
                return
            assert isinstance(result, lc.Responded), result
            assert result.resumed is False, result
            if state == ACTIVE_DETACHED:
                self.model.mark_disconnected(b)
            for q in b.pending:
                b.rows[q] = "rejected"
            if state == ACTIVE_LIVE:
                self.model.end_agent(b, Expected("rejected"))

        def answer_missing_a_question(self, pick: int, active: bool) -> None:
            """Bad input: nothing is written (the after-step checks prove it), the field is named."""
            b = self._bundle(pick, active)
            state = self.model.state(b.pending_id)
            respond = self.svc.pending.respond(b.pending_id, [], rejected=False, authorize=trusted)
            if state == GONE:
                self._expect_error(respond, NotFound)
            elif state in (ACTIVE_LIVE, ACTIVE_DETACHED):
                with pytest.raises(InvalidInput, match="answers"):
                    self.h.run(respond)
            else:
                assert isinstance(self.h.run(respond), lc.Conflict)

        def cancel(self, pick: int, active: bool) -> None:
            b = self._bundle(pick, active)
            state = self.model.state(b.pending_id)
            cancelled = self.h.run(self.svc.pending.cancel(b.pending_id, authorize=trusted))
            assert cancelled is (state == ACTIVE_LIVE)
            if cancelled:
                for q in b.pending:
                    b.rows[q] = "cancelled"
                self.model.end_agent(b, Expected("closed", "cancelled"))

        def post(self, pick: int, kind: str) -> None:
            s = self._session(pick)
            work = self.svc.operations.post_message(s.id, content="hello", author="agent", kind=kind)
            if s.terminal:
                self._expect_error(work, InvalidState)
                return
            message = self.h.run(work)
            if s.current_turn() is None:
                s.turns.append(MTurn(message.turn_id))
            assert message.turn_id == s.current_turn()
            s.messages[message.id] = (kind, message.turn_id)

        def delete_message(self, pick: int) -> None:
            """Deleting messages never moves turn ownership backward."""
            candidates: list[tuple[str, Any]] = []
            for s in self.model.sessions.values():
                candidates += [(m, s) for m in s.messages]
            for b in self.model.bundles.values():
                candidates += [(b.row_ids[q], b) for q in b.rows]
            if not candidates:
                return
            message_id, owner = sorted(candidates, key=lambda c: c[0])[pick % len(candidates)]
            assert self.h.run(self.svc.operations.delete_message(message_id)) is True
            if isinstance(owner, MSession):
                del owner.messages[message_id]
            else:
                q = next(q for q, m in owner.row_ids.items() if m == message_id)
                del owner.rows[q]
            self.model.release_agents()

        def set_state(self, pick: int, state: str) -> None:
            s = self._session(pick)
            work = self.svc.operations.set_session_state(s.id, SessionState(state))
            if s.terminal and state != s.state:
                self._expect_error(work, InvalidState)
                return
            self.h.run(work)
            if state in ("COMPLETED", "FAILED", "CANCELLED"):
                self.model.expire_current(s.id)
            s.state = state
            self.model.release_agents()

        def restart(self) -> None:
            """The server process goes away and a new one starts over the same database: its startup
            recovery detaches the questions whose waiters died with the old process."""
            for b in self.model.bundles.values():
                if b.agent is not None:
                    self.agents[b.agent].zombie = True
                    b.agent = None

            self.restarts += 1

            async def bounce() -> None:
                await self.h.stop()
                await self.h.start()

            self.h.run(bounce())
            self.model.detach_orphans()

        # --- after every step -------------------------------------------------------------------

        @invariant()
        def agents_end_exactly_as_the_model_says(self) -> None:
            async def settle() -> None:
                for number, expected in self.model.expected.items():
                    run = self.agents[number]
                    if run.checked:
                        continue
                    outcome = await asyncio.wait_for(asyncio.shield(run.task), 5)
                    assert _outcome_matches(outcome, expected), (number, outcome, expected)
                    if isinstance(outcome, lc.Answered):
                        self.live_deliveries.append(outcome.pending_id)
                    run.checked = True
                if any(b.agent is not None for b in self.model.bundles.values()):
                    await asyncio.sleep(0.01)

            self.h.run(settle())
            for b in self.model.bundles.values():
                if b.agent is not None:
                    run = self.agents[b.agent]
                    assert not run.task.done(), (b.pending_id, run.task.result())

        @invariant()
        def projections_match_and_revisions_never_decrease(self) -> None:
            projections = self.h.run(self.svc.reads.pending_for_sessions(list(self.model.sessions)))
            for session_id, s in self.model.sessions.items():
                p = projections[session_id]
                assert p.current_turn_id == s.current_turn(), session_id
                assert p.pending_action == self.model.pending_action(session_id), session_id
                key = p.revision.key()
                if session_id in self.revisions:
                    before, action = self.revisions[session_id]
                    assert key >= before, "a revision never decreases"
                    if action != p.pending_action:
                        assert key > before, "a changed projection carries a newer revision"
                self.revisions[session_id] = (key, p.pending_action)

        @invariant()
        def bundle_states_and_rows_match(self) -> None:
            async def load_all() -> dict[str, lc.Bundle | None]:
                # One read snapshot for every bundle, each derived exactly as respond derives it.
                async with self.svc.deps.db.read() as conn:
                    return {p: await self.svc.pending.core.load(conn, p) for p in self.model.bundles}

            loaded = self.h.run(load_all())
            for pending_id, b in self.model.bundles.items():
                stored = loaded[pending_id]
                state = self.model.state(pending_id)
                if state == GONE:
                    assert stored is None, pending_id
                    continue
                assert stored is not None, pending_id
                assert stored.state.value == state, (pending_id, stored.state, state)
                assert {r.question_id: r.status for r in stored.rows} == b.rows, pending_id
                flags = {r.question_id: flag(r.metadata.get("agent_disconnected")) for r in stored.rows}
                assert flags == {q: b.disconnected[q] for q in b.rows}, (pending_id, "agent_disconnected")
                assert not any(r.claimed for r in stored.rows), "no delivery intent outlives its step"

        @invariant()
        def every_answer_delivered_exactly_once(self) -> None:
            log = self._dispatch_log()
            assert [(d["pending_id"], d["outcome"]) for d in log] == self.model.dispatches
            assert len({d["turn_id"] for d in log}) == len(log), "every dispatch has its own successor"
            delivered = self.live_deliveries + [
                d["pending_id"] for d in log if d["outcome"] in ("accepted", "ambiguous")
            ]
            assert len(delivered) == len(set(delivered)), "an answer was delivered twice"
            answered = {pid for pid, b in self.model.bundles.items() if "answered" in b.rows.values()}
            # Rows of a deleted answered question are gone from the model; their delivery still counts.
            assert answered <= set(delivered), "an answered bundle was never delivered"
            assert set(delivered) == set(self.model.deliveries)

    return LifecycleMachine


@pytest.mark.scenario("S02", "S03", "S15", "S33")
def test_random_lifecycles_keep_projections_states_and_dispatches_as_the_spec_says(
    database_url: str, dialect: str, tmp_path: Path
) -> None:
    harness = Harness(database_url, tmp_path / "dispatches.jsonl")
    try:
        run_state_machine_as_test(
            make_machine(harness),
            settings=settings(
                max_examples=EXAMPLES[dialect],
                stateful_step_count=STEPS,
                derandomize=True,
                database=None,
                deadline=None,
                print_blob=True,
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        harness.close()
