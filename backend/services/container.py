"""Builds the services once per process and wires their seams."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from backend.config import Settings
from backend.executors.base import Executor, PromptRequest
from backend.executors.scripted import ScriptedExecutor
from backend.executors.webhook import WebhookExecutor
from backend.repository import tasks
from backend.services.access import Access
from backend.services.context import Deps
from backend.services.decisions import Decisions
from backend.services.inbox import Inbox
from backend.services.live import LiveHub
from backend.services.needs_you import NeedsYou
from backend.services.needs_you_live import NeedsYouHub
from backend.services.operations import Operations
from backend.services.orchestrator import Orchestrator
from backend.services.pending.actions import PendingActions
from backend.services.permission_rules import PermissionRules
from backend.services.permissions import Permissions
from backend.services.prompt_channel import PromptChannel
from backend.services.reach import Reach
from backend.services.reads import Reads
from backend.services.recovery import Recovery
from backend.services.resume_recovery import ReservationRecovery
from backend.services.runner_sessions import RunnerSessions
from backend.services.summaries import Summaries
from backend.services.waiters import WaiterHub
from backend.services.watchdog import Watchdogs


def executor_for(settings: Settings, prompts: PromptChannel) -> Executor:
    """TURNWISE_EXECUTOR: channel (default) | webhook (TURNWISE_WEBHOOK_URL) | scripted."""
    kind = settings.executor
    if kind == "channel":
        return prompts
    if kind == "webhook":
        if not settings.webhook_url:
            raise ValueError("TURNWISE_EXECUTOR=webhook needs TURNWISE_WEBHOOK_URL")
        return WebhookExecutor(settings.webhook_url)
    if kind == "scripted":
        return ScriptedExecutor(list(settings.scripted_outcomes), settings.scripted_log)
    raise ValueError(f"TURNWISE_EXECUTOR must be channel, webhook or scripted, not {kind!r}")


@dataclass
class Services:
    deps: Deps
    operations: Operations
    reads: Reads
    summaries: Summaries
    access: Access
    live: LiveHub
    prompts: PromptChannel
    waiters: WaiterHub
    pending: PendingActions
    permissions: Permissions
    permission_rules: PermissionRules
    reach: Reach
    recovery: Recovery
    orchestrator: Orchestrator
    watchdogs: Watchdogs
    resume_recovery: ReservationRecovery
    inbox: Inbox
    needs_you: NeedsYou
    needs_you_live: NeedsYouHub
    decisions: Decisions
    runners: RunnerSessions

    @classmethod
    def build(cls, deps: Deps) -> Services:
        summaries = Summaries(deps)
        waiters = WaiterHub(deps)
        prompts = PromptChannel(deps)
        orchestrator = Orchestrator(deps, executor_for(deps.settings, prompts))
        watchdogs = Watchdogs(deps, orchestrator)
        resume_recovery = ReservationRecovery(deps, orchestrator)
        recovery = Recovery(deps, waiters, resume_recovery)
        inbox = Inbox(deps, orchestrator, waiters)
        prompts.take_inbox = _inbox_taker(deps, inbox)
        reach = Reach(deps)
        pending = PendingActions(
            deps,
            waiters,
            resumer=inbox,
            refresh_summaries=summaries.refresh,
            primary_answer_notifier=watchdogs.arm,
            on_asked=reach,
        )
        live = LiveHub(deps, summaries)
        needs_you = NeedsYou(deps, waiters)
        # Every process hears of each new bundle's session, so a respond anywhere locks it at once.
        live.bundle_sessions.append(pending.remember_session)
        operations = Operations(deps, reservations=orchestrator)
        access = Access(deps)
        # The same lifecycle, for the permission kind.
        permissions = Permissions(pending)
        return cls(
            deps=deps,
            operations=operations,
            reads=Reads(deps),
            summaries=summaries,
            access=access,
            live=live,
            prompts=prompts,
            waiters=waiters,
            pending=pending,
            permissions=permissions,
            permission_rules=PermissionRules(deps),
            reach=reach,
            recovery=recovery,
            orchestrator=orchestrator,
            watchdogs=watchdogs,
            resume_recovery=resume_recovery,
            inbox=inbox,
            needs_you=needs_you,
            needs_you_live=NeedsYouHub(deps, needs_you),
            decisions=Decisions(deps),
            runners=RunnerSessions(deps, operations, permissions, pending, access),
        )


def _inbox_taker(deps: Deps, inbox: Inbox) -> Callable[[str], Awaitable[list[PromptRequest]]]:
    """The prompt channel's way to a session's inbox: the prompts taken (as `agentPrompts` takes
    them), each as the prompt request of the session's task."""

    async def take_inbox(session_id: str) -> list[PromptRequest]:
        items = await inbox.take(session_id, via="agentPrompts")
        if not items:
            return []
        async with deps.db.read() as conn:
            task_id = (await tasks.get_session(conn, session_id)).task_id
        return [
            PromptRequest(session_id, task_id, i.turn_id, i.turn_id, i.prompt, i.pending_id) for i in items
        ]

    return take_inbox
