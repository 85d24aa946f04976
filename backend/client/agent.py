"""An async agent of one session: ask people, receive resume prompts, post, complete turns.

async with Agent(url, token, session_id) as agent:
    result = await agent.ask([{"prompt": "Which database?", "options": [...]}], timeout_seconds=30)
    allowed = await agent.ask_permission("Bash", {"command": "make deploy"})  # decided | detached | closed
    if result.status == "detached":
        async for prompt in agent.prompts():   # late answers, queued ones first, exactly once
            await prompt.ack()
            ...
            await agent.complete_turn(prompt.turn_id, prompt.generation)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import WebSocketException

from backend.client.transport import ConnectionRefused, GraphQLRequestError, GraphQLTransport

log = logging.getLogger("turnwise.client")

# A connection that dropped or could not be made: reconnect. GraphQL errors are the caller's.
LOST = (OSError, WebSocketException)

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $c: String, $t: Float) {
  askClarification(sessionId: $s, questions: $q, context: $c, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId turnId } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds customText } }
    ... on ClarificationRejected { pendingId }
    ... on ClarificationDetached { pendingId }
    ... on ClarificationClosed { pendingId status }
  } }"""
ASK_PERMISSION = """subscription($s: ID!, $n: String!, $i: JSON!, $u: String, $c: String, $t: Float) {
  askPermission(sessionId: $s, toolName: $n, input: $i, toolUseId: $u, context: $c, timeoutSeconds: $t) {
    __typename
    ... on PermissionAsked { request { pendingId turnId } }
    ... on PermissionDecided { pendingId decision { behavior updatedInput message } }
    ... on PermissionDetached { pendingId }
    ... on PermissionClosed { pendingId }
  } }"""
PROMPTS = "subscription($s: ID!) { agentPrompts(sessionId: $s) { sessionId turnId generation prompt } }"
ACK = "mutation($t: ID!, $a: Boolean!) { acknowledgePrompt(turnId: $t, accepted: $a) }"
POST = """mutation($s: ID!, $c: String!, $k: String!) {
  postMessage(sessionId: $s, content: $c, kind: $k) { id } }"""
START = "mutation($s: ID!) { startTurn(sessionId: $s) { id } }"
COMPLETE = "mutation($t: ID!, $g: String) { completeTurn(turnId: $t, generation: $g) { id } }"

OUTCOMES = {
    "ClarificationAnswered": "answered",
    "ClarificationRejected": "rejected",
    "ClarificationDetached": "detached",
    "ClarificationClosed": "closed",
}
PERMISSION_OUTCOMES = {
    "PermissionDecided": "decided",
    "PermissionDetached": "detached",
    "PermissionClosed": "closed",
}


@dataclass(frozen=True, slots=True)
class AskResult:
    """`status`: answered | rejected | detached | closed; `answers` as the API returns them."""

    status: str
    pending_id: str
    answers: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PermissionResult:
    """`status`: decided | detached | closed; `decision` as the API returns it (decided only):
    `behavior` ALLOW or DENY, `updatedInput` (the input to run with), `message` (a deny's reason).
    `turn_id`: the turn the request was asked in."""

    status: str
    pending_id: str
    decision: dict[str, Any] | None = None
    turn_id: str | None = None


@dataclass
class Prompt:
    """A resume prompt; acknowledge it (`ack`) before working on it."""

    agent: Agent
    session_id: str
    turn_id: str
    generation: str
    text: str

    async def ack(self, accepted: bool = True) -> bool:
        data = await self.agent.transport.execute(ACK, {"t": self.turn_id, "a": accepted})
        return bool(data["acknowledgePrompt"])


class Agent:
    def __init__(self, base_url: str, token: str, session_id: str, *, reconnect_seconds: float = 1.0) -> None:
        self.transport = GraphQLTransport(base_url, token)
        self.session_id = session_id
        self.reconnect_seconds = reconnect_seconds

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def ask(
        self,
        questions: Sequence[dict[str, Any]],
        *,
        context: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AskResult:
        """Ask and wait (the live waiter). A dropped connection detaches the question server-side;
        asking the same questions again re-attaches to it, so a reconnect never asks twice."""
        variables = {"s": self.session_id, "q": list(questions), "c": context, "t": timeout_seconds}
        while True:
            try:
                async with self.transport.subscribe(ASK, variables) as results:
                    async for data in results:
                        outcome = data["askClarification"]
                        status = OUTCOMES.get(outcome["__typename"])
                        if status is not None:
                            return AskResult(
                                status, str(outcome["pendingId"]), list(outcome.get("answers") or [])
                            )
            except (GraphQLRequestError, ConnectionRefused):
                raise
            except LOST:
                log.warning("ask connection lost; asking again", exc_info=True)
            await asyncio.sleep(self.reconnect_seconds)

    async def ask_permission(
        self,
        tool_name: str,
        tool_input: dict[str, Any],
        *,
        tool_use_id: str | None = None,
        context: str | None = None,
        timeout_seconds: float | None = None,
    ) -> PermissionResult:
        """Ask a person to allow a tool call and wait (the live waiter). As with `ask`, a dropped
        connection detaches the request server-side and asking the same again re-attaches to it."""
        variables = {
            "s": self.session_id,
            "n": tool_name,
            "i": tool_input,
            "u": tool_use_id,
            "c": context,
            "t": timeout_seconds,
        }
        turn_id: str | None = None
        while True:
            try:
                async with self.transport.subscribe(ASK_PERMISSION, variables) as results:
                    async for data in results:
                        outcome = data["askPermission"]
                        if outcome["__typename"] == "PermissionAsked":
                            turn_id = outcome["request"].get("turnId")
                            continue
                        status = PERMISSION_OUTCOMES.get(outcome["__typename"])
                        if status is not None:
                            decision = outcome.get("decision")
                            return PermissionResult(status, str(outcome["pendingId"]), decision, turn_id)
            except (GraphQLRequestError, ConnectionRefused):
                raise
            except LOST:
                log.warning("permission request connection lost; asking again", exc_info=True)
            await asyncio.sleep(self.reconnect_seconds)

    async def prompts(self) -> AsyncIterator[Prompt]:
        """Hold the session's prompt channel for as long as the caller iterates; queued late answers
        come first. Reconnects when the connection drops."""
        while True:
            try:
                async with self.transport.subscribe(PROMPTS, {"s": self.session_id}) as results:
                    async for data in results:
                        p = data["agentPrompts"]
                        yield Prompt(
                            self, str(p["sessionId"]), str(p["turnId"]), str(p["generation"]), p["prompt"]
                        )
            except (GraphQLRequestError, ConnectionRefused):
                raise
            except LOST as exc:
                # An expected event (a server restart, a network blip): one line; the traceback
                # only for a debugging reader.
                log.warning("prompt channel lost (%s); reconnecting", exc)
                log.debug("prompt channel lost", exc_info=True)
            await asyncio.sleep(self.reconnect_seconds)

    async def post_message(self, content: str, kind: str = "message") -> str:
        data = await self.transport.execute(POST, {"s": self.session_id, "c": content, "k": kind})
        return str(data["postMessage"]["id"])

    async def start_turn(self) -> str:
        return str((await self.transport.execute(START, {"s": self.session_id}))["startTurn"]["id"])

    async def complete_turn(self, turn_id: str, generation: str | None = None) -> None:
        await self.transport.execute(COMPLETE, {"t": turn_id, "g": generation})
