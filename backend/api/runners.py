"""Runner tokens and what their hooks report: issueRunnerToken, runnerEvent, runnerAskPermission.

A person issues a runner token for their agent runner (Claude Code or Codex with `turnwise hook`).
The runner names the agent client's session and the folder it runs in instead of a Turnwise session:
its session of that client session is made on first sight (`services/runner_sessions.py`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from backend.api.access import AGENT_ROLES
from backend.api.admin import IssuedToken
from backend.api.clarifications import live_wait
from backend.api.context import Context
from backend.api.permissions import PermissionOutcome, permission_outcome
from backend.api.types import TaskSession
from backend.domain.errors import Forbidden
from backend.domain.states import PendingActionKind
from backend.services.runner_sessions import Runner
from backend.services.runner_sessions import RunnerEvent as RunnerEventKind

RunnerEvent = strawberry.enum(
    RunnerEventKind,
    name="RunnerEvent",
    description="A hook event of the agent client: SESSION_START (the session runs), USER_PROMPT_SUBMIT "
    "(new work: a new turn; older pending actions become inert history), STOP (the agent finished "
    "responding: its turn completes), SESSION_END (the session is COMPLETED).",
)

ClientSessionId = Annotated[
    str,
    strawberry.argument(
        description="The agent client's session id (the hook's session_id): one Turnwise session, made "
        "on first sight."
    ),
]
Project = Annotated[
    str,
    strawberry.argument(
        description="The folder the agent runs in (the hook's cwd): a new session's task is the runner's "
        "task of that folder (titled after it, Task.project set to it), made with its first session."
    ),
]


def _runner(info: Info[Context, None]) -> Runner:
    principal = info.context.principal
    if principal.role != "runner" or principal.token_id is None:
        raise Forbidden("this needs a runner token (issueRunnerToken)")
    return Runner(principal.token_id, principal.user_id)


@strawberry.type
class RunnerMutations:
    @strawberry.mutation(
        description="A token for the caller's agent runner (`turnwise hook`): it makes its own tasks and "
        "sessions, granted to the caller, acts as the agent only in them and reads nothing else. "
        "Revoked with revokeToken."
    )
    async def issue_runner_token(self, info: Info[Context, None], label: str) -> IssuedToken:
        principal = info.context.principal
        if principal.role in AGENT_ROLES:
            raise Forbidden(f"a {principal.role} token cannot issue runner tokens")
        issued = await info.context.services.access.issue_runner_token(principal.user_id, label)
        return IssuedToken(
            id=strawberry.ID(issued.id), user_id=strawberry.ID(issued.user_id), token=issued.token
        )

    @strawberry.mutation(
        description="A runner token's hook event in the client session's session (made on first sight, "
        "or anew when it had ended). Null only for the SESSION_END of a session never seen."
    )
    async def runner_event(
        self,
        info: Info[Context, None],
        client_session_id: ClientSessionId,
        project: Project,
        event: RunnerEvent,  # type: ignore[valid-type]
    ) -> TaskSession | None:
        record = await info.context.services.runners.event(
            _runner(info), client_session_id, project, RunnerEventKind(event)
        )
        if record is None:
            return None
        (session,) = await TaskSession.load(info, [record])
        return session


@strawberry.type
class RunnerSubscriptions:
    @strawberry.subscription(
        description="askPermission for a runner token's hook, in the client session's session (made on "
        "first sight). A rule decides at once (PermissionDecided alone); else PermissionAsked, then a "
        "decision, or PermissionClosed: nobody decided within waitSeconds, and the request was closed "
        "(its card and notifications with it), since the client's own prompt takes over. Disconnecting "
        "closes it too."
    )
    async def runner_ask_permission(
        self,
        info: Info[Context, None],
        client_session_id: ClientSessionId,
        project: Project,
        tool_name: str,
        input: Annotated[
            JSON, strawberry.argument(description="The tool's input: a JSON object, its arguments by name.")
        ],
        context: str | None = None,
        wait_seconds: Annotated[
            float | None,
            strawberry.argument(
                description="Seconds to wait for a person (more than 0). Null or left out, and the cap of "
                "larger values: a few seconds below the longest wait the server allows "
                "(TURNWISE_MAX_WAIT_SECONDS)."
            ),
        ] = None,
    ) -> AsyncGenerator[PermissionOutcome, None]:
        stream = info.context.services.runners.ask_permission(
            _runner(info),
            client_session_id,
            project,
            tool_name,
            input,
            context=context,
            wait_seconds=wait_seconds,
        )
        async with live_wait(stream, PendingActionKind.PERMISSION) as outcomes:
            async for outcome in outcomes:
                yield permission_outcome(outcome)
