"""An async agent of one session: ask people, ask to use a tool, receive resume prompts, post,
complete turns.

async with Agent(url, token, session_id) as agent:
    result = await agent.ask([{"prompt": "Which database?", "options": [...]}], timeout_seconds=30)
    decision = await agent.ask_permission("Bash", {"command": "alembic upgrade head"})
    if decision.allowed:
        run(decision.updated_input)
    if result.status == "detached":
        async for prompt in agent.prompts():   # late answers, queued ones first, exactly once
            await prompt.ack()
            ...
            await agent.complete_turn(prompt.turn_id, prompt.generation)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from websockets.exceptions import WebSocketException

from backend.client.transport import ConnectionRefused, GraphQLRequestError, GraphQLTransport

log = logging.getLogger("turnwise.client")
R = TypeVar("R")

# A connection that dropped or could not be made: reconnect. GraphQL errors are the caller's.
LOST = (OSError, WebSocketException)

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $c: String, $t: Float) {
  askClarification(sessionId: $s, questions: $q, context: $c, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId turnId questions { questionId options { id label } } } }
    ... on ClarificationAnswered { pendingId answers { questionId selectedOptionIds customText } }
    ... on ClarificationRejected { pendingId }
    ... on ClarificationDetached { pendingId }
    ... on ClarificationClosed { pendingId status }
  } }"""
ASK_PERMISSION = """subscription($s: ID!, $n: String!, $i: JSON!, $u: String, $c: String, $t: Float) {
  askPermission(sessionId: $s, toolName: $n, input: $i, toolUseId: $u, context: $c, timeoutSeconds: $t) {
    __typename
    ... on PermissionAsked { request { pendingId turnId } }
    ... on PermissionDecided { pendingId decision { behavior updatedInput message auto } }
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


@dataclass(frozen=True, slots=True)
class AskResult:
    """`status`: answered | rejected | detached | closed; `answers` as the API returns them, each with
    `selectedOptionLabels` beside `selectedOptionIds` (the chosen options' labels, in that order)."""

    status: str
    pending_id: str
    answers: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PermissionResult:
    """`status`: allowed (run the tool with `updated_input`: the input asked, or a person's edit of
    it) | denied (`message`: why, when a person said) | detached (nobody decided within the wait:
    denied for now; the request stays open, and a later decision comes back as a prompt) | closed
    (it takes no decision any more). `auto`: a remembered rule decided, nobody was asked.
    `turn_id`: the turn the request was asked in (None when a rule decided before it was asked)."""

    status: str
    pending_id: str
    updated_input: Any = None
    message: str | None = None
    auto: bool = False
    turn_id: str | None = None

    @property
    def allowed(self) -> bool:
        return self.status == "allowed"


def _labelled(answers: list[dict[str, Any]], labels: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    return [
        {
            **a,
            "selectedOptionLabels": [
                labels.get((str(a.get("questionId")), str(o))) for o in a.get("selectedOptionIds") or []
            ],
        }
        for a in answers
    ]


def _permission_result(outcome: dict[str, Any]) -> PermissionResult | None:
    kind = outcome["__typename"]
    pending_id = str(outcome["pendingId"]) if "pendingId" in outcome else ""
    if kind == "PermissionDecided":
        d = outcome["decision"]
        allowed = d["behavior"] == "ALLOW"
        return PermissionResult(
            "allowed" if allowed else "denied",
            pending_id,
            updated_input=d.get("updatedInput") if allowed else None,
            message=d.get("message"),
            auto=bool(d.get("auto")),
        )
    if kind == "PermissionDetached":
        return PermissionResult("detached", pending_id)
    if kind == "PermissionClosed":
        return PermissionResult("closed", pending_id)
    return None  # PermissionAsked: the wait goes on


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
        labels: dict[tuple[str, str], str] = {}

        def result(outcome: dict[str, Any]) -> AskResult | None:
            if outcome["__typename"] == "ClarificationAsked":
                for q in outcome["bundle"]["questions"]:
                    labels.update({(str(q["questionId"]), str(o["id"])): o["label"] for o in q["options"]})
                return None
            status = OUTCOMES.get(outcome["__typename"])
            if status is None:
                return None
            answers = _labelled(list(outcome.get("answers") or []), labels)
            return AskResult(status, str(outcome["pendingId"]), answers)

        return await self._wait(ASK, variables, "askClarification", result)

    async def ask_permission(
        self,
        tool_name: str,
        input: dict[str, Any],
        *,
        tool_use_id: str | None = None,
        context: str | None = None,
        timeout_seconds: float | None = None,
    ) -> PermissionResult:
        """Ask to run a tool and wait for the decision: a remembered rule's at once, else a person's.
        Like `ask`, a reconnect re-attaches to the same request instead of asking twice."""
        variables = {
            "s": self.session_id,
            "n": tool_name,
            "i": input,
            "u": tool_use_id,
            "c": context,
            "t": timeout_seconds,
        }
        asked_in: list[str | None] = [None]

        def result(outcome: dict[str, Any]) -> PermissionResult | None:
            if outcome["__typename"] == "PermissionAsked":
                asked_in[0] = outcome["request"].get("turnId")
            found = _permission_result(outcome)
            return None if found is None else dataclasses.replace(found, turn_id=asked_in[0])

        return await self._wait(ASK_PERMISSION, variables, "askPermission", result)

    async def _wait(
        self,
        query: str,
        variables: dict[str, Any],
        field_name: str,
        result: Callable[[dict[str, Any]], R | None],
    ) -> R:
        """An ask's subscription until `result` makes something of an outcome; asked again after a
        lost connection (the same ask re-attaches to its pending action)."""
        while True:
            try:
                async with self.transport.subscribe(query, variables) as results:
                    async for data in results:
                        done = result(data[field_name])
                        if done is not None:
                            return done
            except (GraphQLRequestError, ConnectionRefused):
                raise
            except LOST:
                log.warning("ask connection lost; asking again", exc_info=True)
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
