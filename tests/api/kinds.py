"""Both kinds of pending action over GraphQL, as the API tests drive them: an agent asks
(askClarification, askPermission) and detaches, a person answers (the first question's second option;
ALLOW with the input as asked), and the request is read back in one shape for both."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from tests.api.client import Client, Subscription
from tests.api.test_clarification_api import ASK, CLARIFICATION, QUESTION, YES, respond

BASH = {"command": "alembic upgrade head", "description": "migrate staging"}

ASK_PERMISSION = """subscription($s: ID!, $n: String!, $i: JSON!, $t: Float) {
  askPermission(sessionId: $s, toolName: $n, input: $i, timeoutSeconds: $t) {
    __typename
    ... on PermissionAsked { request { pendingId state turnId } }
    ... on PermissionDecided { pendingId decision { behavior updatedInput message } }
    ... on PermissionDetached { pendingId }
    ... on PermissionClosed { pendingId }
  } }"""
REQUEST = "state agentDisconnected decision { behavior updatedInput message }"
RESPOND_PERMISSION = f"""mutation($p: ID!, $b: PermissionBehavior!, $m: String) {{
  respondToPermission(pendingId: $p, behavior: $b, message: $m) {{
    __typename
    ... on PermissionResponded {{ resumed queued request {{ {REQUEST} }} }}
    ... on ClarificationConflict {{ reason }}
    ... on ClarificationDeliveryFailed {{ retryable message }}
  }} }}"""
PERMISSION = f"query($p: ID!) {{ permission(pendingId: $p) {{ pendingId {REQUEST} }} }}"


def permission_vars(pending_id: str, behavior: str, **kw: Any) -> dict[str, Any]:
    """respondToPermission's variables ($p $b $i $m $r $any) for a decision; `kw`: updated_input,
    message, remember, any_input."""
    return {
        "p": pending_id,
        "b": behavior,
        "i": kw.get("updated_input"),
        "m": kw.get("message"),
        "r": kw.get("remember", False),
        "any": kw.get("any_input", False),
    }


@dataclass(frozen=True)
class ApiKind:
    name: str
    # What a successful respond returns (a conflict is ClarificationConflict for both kinds).
    responded: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_permission(self) -> bool:
        return self.name == "permission"

    async def detached(self, client: Client, session_id: str, seconds: float = 0.2) -> str:
        """Ask and let the wait run out: the request stays open, detached. Its pending id."""
        if self.is_permission:
            variables = {"s": session_id, "n": "Bash", "i": BASH, "t": seconds}
            async with client.subscribe(ASK_PERMISSION, variables) as sub:
                asked = (await sub.next())["askPermission"]
                assert asked["__typename"] == "PermissionAsked", asked
                pending_id = str(asked["request"]["pendingId"])
                assert (await sub.next())["askPermission"]["__typename"] == "PermissionDetached"
            return pending_id
        async with client.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": seconds}) as sub:
            pending_id = str((await sub.next())["askClarification"]["bundle"]["pendingId"])
            assert (await sub.next())["askClarification"]["__typename"] == "ClarificationDetached"
        return pending_id

    @property
    def asking(self) -> str:
        """The agent's subscription field, which keys each of its results."""
        return "askPermission" if self.is_permission else "askClarification"

    def ask_live(self, client: Client, session_id: str) -> AbstractAsyncContextManager[Subscription]:
        """The agent's ask, waiting live (no timeout of its own); its first result is `asked`."""
        if self.is_permission:
            return client.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": BASH})
        return client.subscribe(ASK, {"s": session_id, "q": [QUESTION]})

    def asked(self, result: dict[str, Any]) -> tuple[str, str]:
        """The pending id and state of what the ask's first result carries."""
        shown = result["request"] if self.is_permission else result["bundle"]
        return str(shown["pendingId"]), str(shown["state"])

    def answered(self, pending_id: str) -> dict[str, Any]:
        """What the live agent receives for `answer`."""
        if self.is_permission:
            decision = {"behavior": "ALLOW", "updatedInput": BASH, "message": None}
            return {"__typename": "PermissionDecided", "pendingId": pending_id, "decision": decision}
        return {
            "__typename": "ClarificationAnswered",
            "pendingId": pending_id,
            "answers": [{"questionId": "q1", "selectedOptionIds": ["q1_opt2"], "customText": None}],
        }

    def closed(self, pending_id: str, status: str) -> dict[str, Any]:
        """What the live agent receives when its request is closed with `status` (a permission
        request's close carries no status)."""
        if self.is_permission:
            return {"__typename": "PermissionClosed", "pendingId": pending_id}
        return {"__typename": "ClarificationClosed", "pendingId": pending_id, "status": status}

    async def answer(self, client: Client, pending_id: str) -> dict[str, Any]:
        """Answer (YES: the second option) or ALLOW as asked; the mutation's result."""
        if self.is_permission:
            data = await client.execute(RESPOND_PERMISSION, {"p": pending_id, "b": "ALLOW"})
            return dict(data["respondToPermission"])
        return dict(await respond(client, pending_id, YES))

    async def read(self, client: Client, pending_id: str) -> dict[str, Any]:
        """`clarification(pendingId)` or `permission(pendingId)`: both carry `state`."""
        if self.is_permission:
            return dict((await client.execute(PERMISSION, {"p": pending_id}))["permission"])
        return dict((await client.execute(CLARIFICATION, {"p": pending_id}))["clarification"])

    def unanswered(self, view: dict[str, Any]) -> bool:
        """The request as read holds no answer: every question pending, or no decision."""
        if self.is_permission:
            return view["decision"] is None
        return [(q["status"], q["response"]) for q in view["questions"]] == [("PENDING", None)]

    def in_prompt(self) -> str:
        """A text the resume prompt of `answer` carries."""
        return "The user allowed it" if self.is_permission else "Which database?"


API_CLARIFICATION = ApiKind("clarification", "ClarificationResponded")
API_PERMISSION = ApiKind("permission", "PermissionResponded")
API_KINDS = [API_CLARIFICATION, API_PERMISSION]
