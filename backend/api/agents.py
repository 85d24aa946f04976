"""The agent surface for prompts: `agentPrompts` (a runner holds it) and `acknowledgePrompt`."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry
from strawberry.types import Info

from backend.api.access import require_session_agent
from backend.api.context import Context
from backend.domain.errors import NotFound


@strawberry.type
class PromptDispatch:
    session_id: strawberry.ID
    turn_id: strawberry.ID
    generation: str
    prompt: str


@strawberry.type
class AgentSubscriptions:
    @strawberry.subscription(
        description="Held by the session's agent runner: resume prompts arrive here; answer each with "
        "acknowledgePrompt. The newest holder of a session takes the channel over."
    )
    async def agent_prompts(
        self, info: Info[Context, None], session_id: strawberry.ID
    ) -> AsyncGenerator[PromptDispatch, None]:
        principal = info.context.principal
        # Unknown and inaccessible sessions get the same NotFound; readers of the task get Forbidden.
        session = await info.context.services.reads.session(str(session_id))
        require_session_agent(principal, session.id, session.task_id)
        async with info.context.services.prompts.hold(str(session_id)) as prompts:
            async for request in prompts:
                yield PromptDispatch(
                    session_id=strawberry.ID(request.session_id),
                    turn_id=strawberry.ID(request.turn_id),
                    generation=request.generation,
                    prompt=request.prompt,
                )


@strawberry.type
class AgentMutations:
    @strawberry.mutation(
        description="Accept or refuse a dispatched prompt. False: no dispatch of that turn is outstanding."
    )
    async def acknowledge_prompt(
        self, info: Info[Context, None], turn_id: strawberry.ID, accepted: bool
    ) -> bool:
        principal = info.context.principal
        turn = await info.context.services.reads.turn(str(turn_id))
        session = await info.context.services.reads.session(turn.session_id)
        try:
            require_session_agent(principal, session.id, session.task_id)
        except NotFound:
            raise NotFound("turn", str(turn_id)) from None
        # An acknowledgement publishes no event, yet it is agent activity for the watchdog.
        info.context.services.watchdogs.note_activity(turn.session_id, "acknowledgePrompt")
        if await info.context.services.prompts.acknowledge(str(turn_id), accepted):
            return True
        # A prompt taken from the session's inbox was already delivered; this records the agent's word.
        return await info.context.services.inbox.acknowledge(str(turn_id))
