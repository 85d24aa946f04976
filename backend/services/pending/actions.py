"""The pending-actions service: the lifecycle both kinds share, and the question kind's front.

One `Core` (collaborators, bundle reads) and the two sides composed over it: `Asking` (the agent's
ask and wait, detach, confirmation) and `Responding` (a person's claim, then delivery, resume or
restore). A kind plugs in what is its own with each call: an `Ask` (its validated specs, and what may
decide it as it is asked) and a `Response` (how what a person sent is checked, and what else it
decides). Questions are plugged in here (`ask`, `respond`); permission requests by
`services/permissions.py`. Also here: cancel, and the workflow guard that refuses to move a task on
while a pending action of it is active.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from backend import faults, metrics
from backend.db.engine import STORAGE_ERRORS
from backend.domain.errors import CorruptData, InvalidInput
from backend.domain.events import EventKind
from backend.domain.lifecycle import (
    Answer,
    Bundle,
    BundleState,
    Claim,
    RespondOutcome,
    WaitOutcome,
    bundle_signature,
    validate_answers,
    validate_questions,
)
from backend.domain.names import plain_name
from backend.domain.records import TaskRecord
from backend.domain.states import ClarificationStatus, PendingActionKind
from backend.repository import bundles, tasks
from backend.services.context import Deps
from backend.services.pending.asking import Ask, Asking, final_outcome
from backend.services.pending.core import AskNotifier, Authorize, Core
from backend.services.pending.responding import Responding, Response
from backend.services.restorer import Restorer
from backend.services.resume import Resumer
from backend.services.uow import uow
from backend.services.waiters import WaiterHub

log = logging.getLogger("turnwise.pending")
MAX_STEP = 200
QUESTIONS = PendingActionKind.CLARIFICATION


@dataclass(frozen=True, slots=True)
class TaskAdvanced:
    task: TaskRecord


@dataclass(frozen=True, slots=True)
class TaskAdvanceBlocked:
    task_id: str
    reason: str
    session_id: str | None


class PendingActions:
    def __init__(
        self,
        deps: Deps,
        hub: WaiterHub,
        *,
        resumer: Resumer | None = None,
        refresh_summaries: Callable[[list[str]], Awaitable[Any]] | None = None,
        primary_answer_notifier: Callable[[Claim], None] | None = None,
        on_asked: AskNotifier | None = None,
    ) -> None:
        self.core = Core(
            deps,
            hub,
            refresh_summaries=refresh_summaries,
            primary_answer_notifier=primary_answer_notifier,
            on_asked=on_asked,
        )
        if resumer is not None:
            self.core.resumer = resumer
        self.asking = Asking(self.core)
        self.responding = Responding(self.core)
        self.core.restorer = Restorer(deps.db, self.responding.restore_later)

    @property
    def deps(self) -> Deps:
        return self.core.deps

    @property
    def restorer(self) -> Restorer:
        return self.core.restorer

    # The seams wired (or swapped by a test) after the service was built.

    @property
    def resumer(self) -> Resumer:
        return self.core.resumer

    @resumer.setter
    def resumer(self, resumer: Resumer) -> None:
        self.core.resumer = resumer

    @property
    def primary_answer_notifier(self) -> Callable[[Claim], None] | None:
        return self.core.primary_answer_notifier

    @primary_answer_notifier.setter
    def primary_answer_notifier(self, notifier: Callable[[Claim], None] | None) -> None:
        self.core.primary_answer_notifier = notifier

    @property
    def refresh_summaries(self) -> Callable[[list[str]], Awaitable[Any]] | None:
        return self.core.refresh_summaries

    @refresh_summaries.setter
    def refresh_summaries(self, refresh: Callable[[list[str]], Awaitable[Any]] | None) -> None:
        self.core.refresh_summaries = refresh

    # --- reads ----------------------------------------------------------------------------------

    def remember_session(self, pending_id: str, session_id: str) -> None:
        self.core.remember_session(pending_id, session_id)

    async def bundle(self, pending_id: str, *, authorize: Authorize) -> Bundle | None:
        return await self.core.bundle(pending_id, authorize=authorize)

    async def active_bundles(
        self, session_ids: Sequence[str], kind: PendingActionKind = QUESTIONS
    ) -> dict[str, Bundle]:
        return await self.core.active_bundles(session_ids, kind)

    # --- ask and wait ---------------------------------------------------------------------------

    def wait_seconds(self, timeout_seconds: float | None) -> float:
        limit = self.deps.settings.max_wait_seconds
        if timeout_seconds is None:
            return limit
        if not timeout_seconds > 0:
            raise InvalidInput("timeoutSeconds", "must be greater than 0")
        return min(float(timeout_seconds), limit)

    def ask(
        self,
        session_id: str,
        questions: Sequence[dict[str, Any]],
        context: str | None,
        timeout_seconds: float | None = None,
    ) -> AsyncGenerator[WaitOutcome, None]:
        """Questions asked: yields `Asked`, then exactly one of Answered / Rejected / Detached /
        Closed. Invalid questions raise InvalidInput here, before anything is written."""
        specs = validate_questions(questions, context)
        return self.asking.ask(
            Ask(
                QUESTIONS,
                session_id,
                specs,
                context,
                bundle_signature(specs, context),
                self.wait_seconds(timeout_seconds),
            )
        )

    def ask_for(self, ask: Ask) -> AsyncGenerator[WaitOutcome, None]:
        """The ask of any kind of pending action, as its kind's front built it (see `Ask`)."""
        return self.asking.ask(ask)

    async def wait_again(self, bundle: Bundle, wait_seconds: float) -> WaitOutcome | None:
        """The agent waits again on a request it asked earlier (MCP `wait_for_answer`), of either
        kind: its waiter re-attaches to that very bundle and waits as the ask did. Never a new row,
        nor a remembered rule's decision (rules decide requests as they are asked). None, having
        written nothing, when the bundle is no longer open to wait on (read it again)."""
        signature = bundle.rows[0].metadata.get("bundle_signature") if bundle.rows else None
        if not isinstance(signature, str) or not signature:
            return None  # a legacy bundle that no ask can name: not re-attachable
        ask = Ask(
            bundle.kind,
            bundle.session_id,
            (),
            bundle.context,
            signature,
            wait_seconds,
            attach_to=bundle.pending_id,
        )
        outcome, _ = await final_outcome(self.asking.ask(ask))
        return outcome

    async def detach_session(self, session_id: str) -> int:
        """Turn teardown: detach every attached pending bundle of the session's current turn."""
        return await self.asking.detach_session(session_id)

    # --- respond --------------------------------------------------------------------------------

    async def respond(
        self,
        pending_id: str,
        answers: Sequence[Answer],
        *,
        rejected: bool,
        authorize: Authorize,
        decided_by: str | None = None,
    ) -> RespondOutcome:
        """Answer (or, rejected, skip) a clarification; `decided_by`: the user answering."""
        return await self.responding.respond(
            Response(
                pending_id,
                QUESTIONS,
                lambda bundle: validate_answers(bundle, answers, rejected=rejected),
                rejected,
                authorize,
                decided_by=decided_by,
            )
        )

    async def respond_for(self, response: Response) -> RespondOutcome:
        """The respond of any kind of pending action, as its kind's front built it (see `Response`)."""
        return await self.responding.respond(response)

    # --- cancel ---------------------------------------------------------------------------------

    async def cancel(self, pending_id: str, *, authorize: Authorize, detached_too: bool = False) -> bool:
        """Cancel a request still owned by a live waiter (`detached_too`: or one still open with none,
        as an MCP task's is between its client's polls); False for anything else (nothing written)."""
        async with uow(self.deps) as w:
            conn = w.conn
            session_id = await bundles.session_of_bundle(conn, pending_id)
            if session_id is None:
                return False
            await w.lock([session_id])
            bundle = await self.core.load(conn, pending_id)
            if bundle is None:
                return False
            authorize(bundle.task_id, bundle.session_id)
            open_states = (
                {BundleState.ACTIVE_LIVE, BundleState.ACTIVE_DETACHED}
                if detached_too
                else {BundleState.ACTIVE_LIVE}
            )
            if bundle.state not in open_states:
                return False
            changed = await bundles.close_pending(conn, session_id, pending_id, ClarificationStatus.CANCELLED)
            if changed:
                w.after_commit(
                    lambda: metrics.observe_decision(bundle.kind.value, "CANCELLED", bundle.asked_at)
                )
                await tasks.mark_running_when_unblocked(conn, session_id)
                w.touch(session_id)
                w.publish_messages(bundle.task_id, session_id, EventKind.MESSAGE_UPDATED, changed)
        if not changed:
            return False
        log.info(
            "pending action cancelled",
            extra={"event": "pending.cancelled", "kind": bundle.kind.value, "pending_id": pending_id},
        )
        return True

    # --- workflow guard -------------------------------------------------------------------------

    async def advance_task(
        self, task_id: str, to_step: str, *, authorize: Authorize
    ) -> TaskAdvanced | TaskAdvanceBlocked:
        step = plain_name("toStep", to_step).strip()
        if not step or len(step) > MAX_STEP:
            raise InvalidInput("toStep", f"must be 1-{MAX_STEP} characters")
        async with uow(self.deps) as w:
            conn = w.conn
            await tasks.get_task(conn, task_id)
            authorize(task_id, None)
            sessions = await tasks.list_sessions(conn, [task_id])
            await w.lock([s.id for s in sessions])
            try:
                faults.check("workflow_guard_read")
                blocking = await bundles.sessions_with_active_bundles(conn, task_id)
            except (*STORAGE_ERRORS, CorruptData):  # not a programming error: those propagate
                # Fail closed: an unreadable pending state never lets the workflow move on.
                log.exception(
                    "workflow guard read failed", extra={"event": "workflow.guard_failed", "task_id": task_id}
                )
                return TaskAdvanceBlocked(task_id, "pending clarification state could not be read", None)
            if blocking:
                return TaskAdvanceBlocked(
                    task_id, "a session of the task has an active clarification", blocking[0]
                )
            task = await tasks.set_workflow_step(conn, task_id, step)
        log.info("task advanced", extra={"event": "workflow.advanced", "task_id": task_id, "step": step})
        return TaskAdvanced(task)
