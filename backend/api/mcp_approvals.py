"""`approve_tool_use` on `/mcp`: Claude Code's permission prompt tool (`--permission-prompt-tool`).

Claude Code calls the tool with `{tool_name, input, tool_use_id}` before it runs a tool that needs
permission, and reads the text content of the result as JSON: `{"behavior": "allow", "updatedInput":
{...}}` runs the tool with that input, `{"behavior": "deny", "message": "..."}` does not. The request
is a pending action of kind `permission` (the same lifecycle as `ask_user_question`). When nobody
decides within the wait, the tool denies for now and says the request stays open: a later ALLOW
reaches the agent as a resume prompt, or through `wait_for_answer(pending_id)`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import types

from backend.api.mcp_arguments import in_tool_words, timeout_arg, tool_execution
from backend.domain import lifecycle as lc
from backend.domain.errors import BrokenInvariant
from backend.domain.lifecycle import Bundle, BundleState
from backend.domain.permissions import ALLOW, DENY, Decision, decision_from_response
from backend.domain.states import ClarificationStatus
from backend.services.container import Services
from backend.services.pending.asking import final_outcome


def approve_tool(timeout_schema: dict[str, Any]) -> types.Tool:
    return types.Tool(
        name="approve_tool_use",
        description=(
            "Ask the person working with you to allow a tool call before you make it (Claude Code: "
            "--permission-prompt-tool mcp__turnwise__approve_tool_use). The result's text is JSON: "
            '{"behavior": "allow", "updatedInput": {...}} (run the tool with that input) or '
            '{"behavior": "deny", "message": "..."}. With no decision in time it denies for now and '
            "the request stays open; call wait_for_answer with its pending_id later."
        ),
        execution=tool_execution(),
        input_schema={
            "type": "object",
            "properties": {
                "tool_name": {"type": "string", "description": "The tool you want to run."},
                "input": {
                    "type": "object",
                    "description": "The tool's input (its arguments by name), as you would run it.",
                },
                "tool_use_id": {"type": ["string", "null"], "description": "Your id of this tool call."},
                "session_id": {
                    "type": ["string", "null"],
                    "description": "Needed only with a user or admin token.",
                },
                "context": {
                    "type": ["string", "null"],
                    "description": "Why you need it; shown with the request.",
                },
                "timeout_seconds": timeout_schema,
            },
            "required": ["tool_name", "input"],
            "additionalProperties": False,
        },
    )


DETACHED = (
    "No decision yet: the person has not answered, so do not run this tool now. The request stays "
    'open for them; continue with other work if you can, and call wait_for_answer with pending_id "{}" '
    "later to learn the decision."
)
CLOSED = (
    "The request was closed without a decision (a newer turn superseded it, or it was cancelled or "
    "expired). Do not run this tool; ask again if you still need it."
)
DELIVERED = "This decision was already delivered to you earlier; it is not repeated."


def decided_result(pending_id: str, decision: Decision) -> types.CallToolResult:
    """Exactly the JSON Claude Code reads, as the text; status and pending id beside it."""
    verdict = decision.for_agent()
    structured: dict[str, Any] = {
        "status": "allowed" if decision.allowed else "denied",
        "pending_id": pending_id,
        **verdict,
    }
    if decision.auto:
        structured["auto"] = True
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(verdict, ensure_ascii=False))],
        structured_content=structured,
    )


def deny_result(pending_id: str, status: str, message: str) -> types.CallToolResult:
    verdict = {"behavior": DENY, "message": message}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(verdict, ensure_ascii=False))],
        structured_content={"status": status, "pending_id": pending_id, **verdict},
    )


def delivered_result(pending_id: str) -> types.CallToolResult:
    """An ALLOW reaches the agent once: asked again, it is not repeated (nor turned into a deny)."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=DELIVERED)],
        structured_content={"status": "delivered", "pending_id": pending_id},
    )


def _decision(answers: tuple[Any, ...], pending_id: str) -> Decision:
    for a in answers:
        if isinstance(a, Decision):
            return a
    raise BrokenInvariant(f"permission {pending_id} was decided without a decision")


class Approvals:
    """The tool's calls; `session_for` resolves and authorizes the session as for the other tools."""

    def __init__(self, services: Services, *, session_for: Callable[[Any, Any], Awaitable[str]]) -> None:
        self.services = services
        self._session_for = session_for

    async def approve_tool_use(self, principal: Any, args: dict[str, Any]) -> types.CallToolResult:
        """`args` are checked against the tool's schema (`mcp_arguments.ToolArguments`)."""
        seconds = timeout_arg(args)
        session_id = await self._session_for(principal, args.get("session_id"))
        with in_tool_words():
            stream = self.services.permissions.ask(
                session_id,
                args["tool_name"],
                args["input"],
                args.get("tool_use_id"),
                args.get("context"),
                seconds,
            )
            outcome, bundle = await final_outcome(stream)
        if outcome is None:
            raise RuntimeError("the permission stream ended without an outcome")
        if isinstance(outcome, lc.Decided):  # a remembered rule allowed it as it was asked
            return self._result(outcome, outcome.pending_id)
        if bundle is None:
            raise BrokenInvariant("the permission stream ended before it asked")
        return self.outcome(outcome, bundle)

    # --- what `wait_for_answer` tells the agent (`mcp.KindResults`) -----------------------------

    def outcome(self, outcome: lc.WaitOutcome, bundle: Bundle) -> types.CallToolResult:
        return self._result(outcome, bundle.pending_id)

    @staticmethod
    def _result(outcome: lc.WaitOutcome, pending_id: str) -> types.CallToolResult:
        if isinstance(outcome, lc.Answered | lc.Rejected | lc.Decided):
            return decided_result(pending_id, _decision(outcome.answers, pending_id))
        if isinstance(outcome, lc.Detached):
            return deny_result(pending_id, "detached", DETACHED.format(pending_id))
        return deny_result(pending_id, "closed", CLOSED)

    def settled(self, pending_id: str, bundle: Bundle | None) -> types.CallToolResult:
        """A request that takes no decision any more: a denial is final (said again), an ALLOW was
        delivered once; anything else (gone, superseded, expired) is closed."""
        if bundle is not None and bundle.state == BundleState.TERMINAL:
            row = bundle.rows[0]
            decision = decision_from_response(row.metadata.get("response"))
            if decision is not None:
                if row.status == ClarificationStatus.REJECTED:
                    return decided_result(pending_id, decision)
                if decision.behavior == ALLOW:
                    return delivered_result(pending_id)
        return deny_result(pending_id, "closed", CLOSED)

    async def from_inbox(
        self, session_id: str, pending_id: str, item: Any, deliverable: bool
    ) -> types.CallToolResult:
        if item.delivered_at is None:
            taken = await self.services.inbox.take(session_id, via="mcp", pending_id=pending_id)
            if taken:
                verdict = (taken[0].answers or [{}])[0].get("decision") or {}
                decision = Decision(ALLOW, updated_input=verdict.get("updatedInput"))
                return decided_result(pending_id, decision)
            if not deliverable:
                return deny_result(pending_id, "closed", CLOSED)
        return delivered_result(pending_id)
