"""The durable inbox: a late answer reaches an agent that was not connected when the person answered.

Our agents are external processes (an MCP client, a runner holding `agentPrompts`); unlike an
orchestrator that can always start its agent, we often have nobody to dispatch a resume prompt to.
`Inbox.resume` is the `Resumer` the clarification service calls for a detached answer: when the
session's prompt channel is held (or the executor is not the prompt channel) it hands the claim to
the orchestrator unchanged; otherwise, in ONE transaction under the session lock, it opens the
successor turn (with the start-event outbox marker), writes the resume prompt to the session's inbox,
retires the claim's delivery intent and flags the answered rows. Nothing is lost (the item commits
with the claim's settlement or not at all; before that, intent recovery restores the claim) and
nothing is delivered twice (taking an item is one conditional UPDATE, and only while its successor is
still the current turn: a newer turn supersedes it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend import faults
from backend.db.engine import utcnow
from backend.domain.events import EventKind
from backend.domain.ids import new_id
from backend.domain.lifecycle import Answer, Claim
from backend.domain.permissions import PERMISSION_KEY, Decision, request_of
from backend.domain.prompts import resume_prompt
from backend.domain.states import TERMINAL_SESSION_STATES
from backend.repository import claims, instances, reservations, runners, tasks, turns
from backend.repository import inbox as repo
from backend.repository.inbox import InboxItem
from backend.services.context import Deps
from backend.services.orchestrator import Orchestrator
from backend.services.prompt_channel import PromptChannel, prompts_channel
from backend.services.resume import ResumeOutcome
from backend.services.uow import uow
from backend.services.waiters import WaiterHub

log = logging.getLogger("turnwise.inbox")


class _Delegate(Exception):
    """An agent holds the channel (or a reservation is in flight): dispatch as usual."""


def rendered_answers(
    rows: Sequence[dict[str, Any]], answers: Sequence[Answer | Decision]
) -> list[dict[str, Any]]:
    """Per question, in order: its id, text, header, the labels chosen and the custom text. A
    permission request: its tool request and the decision as the agent reads it."""
    request = request_of(rows[0]) if rows else None
    if request is not None:
        decisions = [a for a in answers if isinstance(a, Decision)]
        return [
            {
                "question_id": PERMISSION_KEY,
                "tool_name": request.get("tool_name"),
                "input": request.get("input"),
                "tool_use_id": request.get("tool_use_id"),
                "decision": decisions[0].for_agent() if decisions else None,
            }
        ]
    by_question = {a.question_id: a for a in answers if isinstance(a, Answer)}
    out: list[dict[str, Any]] = []
    for md in rows:
        raw = md.get("question")
        question: dict[str, Any] = raw if isinstance(raw, dict) else {}
        qid = str(md.get("question_id") or "")
        answer = by_question.get(qid)
        labels = {
            str(o.get("id")): str(o.get("label"))
            for o in question.get("options") or []
            if isinstance(o, dict) and o.get("id") is not None
        }
        selected = list(answer.selected_option_ids) if answer else []
        out.append(
            {
                "question_id": qid,
                "question": str(question.get("prompt") or ""),
                "header": question.get("title"),
                "selected_option_ids": selected,
                "selected": [labels.get(s, s) for s in selected],
                "custom_text": answer.custom_text if answer else None,
            }
        )
    return out


@dataclass
class Inbox:
    deps: Deps
    orchestrator: Orchestrator
    # Decides which server processes are gone (the rule orphaned waiters use), for runner leases.
    hub: WaiterHub | None = None

    async def resume(self, claim: Claim) -> ResumeOutcome:
        # Only the prompt channel can tell "nobody is connected"; a webhook or scripted executor decides
        # for itself (an explicit refusal keeps the answer retryable, S16).
        if claim.rejected or not isinstance(self.orchestrator.executor, PromptChannel):
            return await self.orchestrator.resume(claim)
        try:
            return await self._queue(claim)
        except _Delegate:
            return await self.orchestrator.resume(claim)

    async def _queue(self, claim: Claim) -> ResumeOutcome:
        item_id = new_id()
        async with uow(self.deps, [claim.session_id]) as w:
            conn = w.conn
            session = await tasks.get_session(conn, claim.session_id)
            if session.state in TERMINAL_SESSION_STATES:
                return ResumeOutcome(False, True, "the session has ended")
            if await turns.current_turn(conn, claim.session_id) != claim.turn_id:
                return ResumeOutcome(False, True, "the clarification's turn is no longer current")
            if self.orchestrator.quarantined(claim.session_id):
                raise _Delegate
            if await runners.live_holder(conn, claim.session_id) is not None:
                raise _Delegate
            if await reservations.live_reservation(conn, claim.session_id) is not None:
                raise _Delegate
            rows = await reservations.source_rows(conn, claim.message_ids)
            successor = await turns.insert_turn(
                conn, claim.session_id, {reservations.START_EVENT_PENDING: True}
            )
            await turns.close_predecessors(conn, [successor.id])
            await repo.put(
                conn,
                item_id=item_id,
                session_id=claim.session_id,
                turn_id=successor.id,
                source_turn_id=claim.turn_id,
                pending_id=claim.pending_id,
                claim_id=claim.claim_id,
                prompt=resume_prompt(rows, claim.answers),
                answers=rendered_answers(rows, claim.answers),
            )
            await claims.settle_claim(conn, claim.message_ids, claim.claim_id)
            await repo.mark_rows(conn, claim.message_ids)
            await tasks.mark_running_when_unblocked(conn, claim.session_id)
            w.touch(claim.session_id)
        log.info(
            "answer queued",
            extra={
                "event": "inbox.queued",
                "pending_id": claim.pending_id,
                "claim_id": claim.claim_id,
                "turn_id": successor.id,
            },
        )
        await faults.hit("inbox.after_queue")
        # The start event goes out through the outbox path: its marker is cleared only once the bus
        # took it, and startup replays it otherwise.
        with contextlib.suppress(Exception):
            await self.orchestrator.replay_start([(successor.id, claim.session_id, claim.task_id, False)])
        # A runner that connected while this committed re-reads its inbox on this nudge.
        with contextlib.suppress(Exception):
            await self.deps.bus.publish(prompts_channel(claim.session_id), {"inbox": True})
        return ResumeOutcome(True, False, "the answer waits in the session's inbox", queued=True)

    # --- delivery -------------------------------------------------------------------------------

    async def take(self, session_id: str, *, via: str, pending_id: str | None = None) -> list[InboxItem]:
        """Hand out the deliverable items (at most once); close the superseded ones."""
        async with uow(self.deps, [session_id]) as w:
            closed = await repo.close_stale_of_session(w.conn, session_id)
            items = await repo.take(w.conn, session_id, via=via, pending_id=pending_id)
            changed = await repo.unmark_bundles(
                w.conn, session_id, sorted({*closed, *(i.pending_id for i in items)})
            )
            if changed:
                w.touch(session_id)
                task_id = (await tasks.get_session(w.conn, session_id)).task_id
                w.publish_messages(task_id, session_id, EventKind.MESSAGE_UPDATED, changed)
        for item in items:
            log.info(
                "inbox item delivered",
                extra={"event": "inbox.delivered", "pending_id": item.pending_id, "via": via},
            )
        return items

    async def for_bundle(self, pending_id: str) -> tuple[InboxItem, bool] | None:
        async with self.deps.db.read() as conn:
            return await repo.for_bundle(conn, pending_id)

    async def acknowledge(self, turn_id: str) -> bool:
        async with self.deps.db.write() as conn:
            return await repo.acknowledge(conn, turn_id)

    async def recover(self) -> int:
        """Startup: drop the prompt-channel leases of processes that are gone (a runner connected to
        a crashed process would otherwise count as connected until its lease ran out, and a late
        answer would be dispatched to nobody instead of queued); close the items a newer turn
        superseded while no process was running, and drop their rows' waiting flag."""
        async with self.deps.db.write() as conn:
            if self.hub is not None:
                holders = await runners.holding_instances(conn)
                beats = await instances.heartbeats(conn, holders)
                now = utcnow()
                gone = [
                    i
                    for i in holders
                    if i != self.hub.instance_id
                    and (not self.hub.shared_bus or i not in beats or now - beats[i] >= self.hub.stale_after)
                ]
                released = await runners.release_instances(conn, gone)
                if released:
                    log.info("runner leases released", extra={"event": "inbox.leases", "released": released})
            closed = await repo.close_stale(conn)
            by_session: dict[str, list[str]] = {}
            for session_id, pending_id in closed:
                by_session.setdefault(session_id, []).append(pending_id)
            for session_id, pending_ids in by_session.items():
                await repo.unmark_bundles(conn, session_id, pending_ids)
            if by_session:
                await tasks.bump_pending_seqs(conn, list(by_session))
        if closed:
            log.info("inbox items superseded", extra={"event": "inbox.recovered", "closed": len(closed)})
        return len(closed)
