"""`/mcp`: the Model Context Protocol endpoint (Streamable HTTP, the official `mcp` SDK).

Off-the-shelf agents (any MCP client) ask people through three tools whose names and fields are fixed:
`ask_user_question` (the live waiter, the same lifecycle as `askClarification`), `approve_tool_use`
(Claude Code's permission prompt tool, `api/mcp_approvals.py`) and `wait_for_answer` (collect a late
answer or decision exactly once, or wait again while the action is open). Bearer tokens as
for GraphQL: no valid token is HTTP 401 before MCP runs; acting in a session needs its agent token or
an admin token (with `session_id`). Every refusal is an MCP tool error (`isError`) naming the field,
and writes nothing, except for an unknown tool: a JSON-RPC invalid-params error (a tool error with
`TURNWISE_MCP_ADAPTER=0`, `api/mcp_adapter.py`). A browser request
(one with an `Origin`) must address one of this server's host names and come from the same origin or
an allowed one (as for GraphQL WebSockets): HTTP 403 otherwise, so a page whose name was rebound to
this machine cannot reach it.

The transport is stateless (every POST is self-contained), so any server process behind one database
can serve any call; the waiter hub and the inbox already work across processes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from importlib import metadata
from typing import Any, Protocol

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from backend.api import mcp_adapter
from backend.api.access import require_session_agent
from backend.api.auth import Authenticator, Principal, bearer_from_header
from backend.api.browsers import BrowserRule, headers_of
from backend.api.hygiene import PROBLEM
from backend.api.mcp_approvals import Approvals, approve_tool
from backend.api.mcp_arguments import (
    ToolArguments,
    in_tool_words,
    storable_paths,
    timeout_arg,
    tool_execution,
)
from backend.api.mcp_tasks import TASKS_EXTENSION, McpTaskEndpoint, TaskServer
from backend.db.health import is_outage
from backend.domain import lifecycle as lc
from backend.domain.errors import (
    BrokenInvariant,
    Forbidden,
    InvalidInput,
    NotFound,
    TurnwiseError,
    Unauthenticated,
    Unavailable,
)
from backend.domain.lifecycle import Bundle, BundleState
from backend.domain.states import ClarificationStatus, PendingActionKind
from backend.services.container import Services
from backend.services.inbox import rendered_answers
from backend.services.pending.asking import final_outcome
from backend.services.pending.core import trusted

log = logging.getLogger("turnwise.mcp")

PRINCIPAL_KEY = "turnwise.principal"
MAX_QUESTIONS = 4
MIN_OPTIONS, MAX_OPTIONS = 2, 4
MAX_HEADER = lc.MAX_TITLE
CLAIM_POLL_SECONDS = 0.05

_OPTION = {
    "type": "object",
    "properties": {
        "label": {
            "type": "string",
            "description": "What the person picks (1-5 words); the options' labels must differ.",
        },
        "description": {"type": ["string", "null"], "description": "What choosing it means."},
    },
    "required": ["label"],
    "additionalProperties": False,
}
_QUESTION = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "The complete question, ending with '?'."},
        "header": {
            "type": ["string", "null"],
            "maxLength": MAX_HEADER,
            "description": "A short tag, at most 12 chars.",
        },
        "options": {"type": "array", "minItems": MIN_OPTIONS, "maxItems": MAX_OPTIONS, "items": _OPTION},
        "multiSelect": {"type": "boolean", "default": False},
    },
    "required": ["question", "options"],
    "additionalProperties": False,
}


def _timeout_schema(max_wait_seconds: float) -> dict[str, Any]:
    longest = f"{max_wait_seconds:g}"
    return {
        "type": "number",
        "exclusiveMinimum": 0,
        "description": f"Seconds to wait for the answer before the result says 'detached' (the question "
        f"stays open). Leave it out to wait the longest this server allows, {longest} s; a larger value "
        "waits that long too. Not null.",
    }


def tools(max_wait_seconds: float) -> list[types.Tool]:
    """The three tools, their input schemas stating the server's longest wait (the default)."""
    timeout = _timeout_schema(max_wait_seconds)
    return [
        types.Tool(
            name="ask_user_question",
            description=(
                "Ask the person working with you 1-4 multiple-choice questions and wait for the answer. "
                "They may also write their own answer or skip. If no answer comes in time the question "
                "stays open (status 'detached'): carry on if you can and call wait_for_answer later."
            ),
            execution=tool_execution(),
            input_schema={
                "type": "object",
                "properties": {
                    "questions": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_QUESTIONS,
                        "items": _QUESTION,
                    },
                    "session_id": {
                        "type": ["string", "null"],
                        "description": "Needed only with a user or admin token.",
                    },
                    "context": {
                        "type": ["string", "null"],
                        "description": "Why you ask; shown with the questions.",
                    },
                    "timeout_seconds": timeout,
                },
                "required": ["questions"],
                "additionalProperties": False,
            },
        ),
        approve_tool(timeout),
        types.Tool(
            name="wait_for_answer",
            description=(
                "Collect the answer to a question asked earlier with ask_user_question, or the decision on "
                "a tool call asked with approve_tool_use (by its pending_id): returns a late answer at "
                "once (only once), or waits again while the question or request is open."
            ),
            input_schema={
                "type": "object",
                "properties": {"pending_id": {"type": "string"}, "timeout_seconds": timeout},
                "required": ["pending_id"],
                "additionalProperties": False,
            },
        ),
    ]


TOOL_NAMES = frozenset(t.name for t in tools(1))

NEXT = {
    "answered": "The person answered. Continue with their answer.",
    "rejected": "The person chose to skip these questions. Continue without the answer; do not ask again.",
    "closed": "The question was closed without an answer (superseded, cancelled or expired). Do not "
    "wait for it; continue, or ask again if you still need to know.",
    "delivered": "This answer was already delivered to you earlier; it is not repeated.",
}


def _detached_text(pending_id: str) -> str:
    return (
        "No answer yet; the question stays open for the person. Continue with other work if you can, "
        f'and call wait_for_answer with pending_id "{pending_id}" later to collect the answer.'
    )


# --- input --------------------------------------------------------------------------------------


def questions_for_service(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool's questions (checked against its schema) as the clarification service takes them."""
    out: list[dict[str, Any]] = []
    for qi, q in enumerate(raw):
        labels: dict[str, int] = {}
        for oi, o in enumerate(q["options"]):
            # The answer names the options picked by label, so two alike would make it ambiguous.
            seen = labels.setdefault(o["label"].strip().casefold(), oi)
            if seen != oi:
                raise InvalidInput(
                    f"questions[{qi}].options[{oi}].label",
                    f"repeats the label of questions[{qi}].options[{seen}]",
                )
        out.append(
            {
                "title": q.get("header"),
                "prompt": q["question"],
                "multi_select": q.get("multiSelect", False),
                "options": [{"label": o["label"], "description": o.get("description")} for o in q["options"]],
            }
        )
    return out


# --- results ------------------------------------------------------------------------------------


def _ordered_metadata(bundle: Bundle) -> list[dict[str, Any]]:
    def index(md: dict[str, Any]) -> int:
        value = md.get("question_index")
        return value if isinstance(value, int) else 0

    return sorted((dict(r.metadata) for r in bundle.rows), key=index)


def _public(answers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "question": a.get("question") or "",
            "header": a.get("header"),
            "selected": list(a.get("selected") or []),
            "custom_text": a.get("custom_text"),
        }
        for a in answers
    ]


def result(status: str, pending_id: str, answers: Sequence[dict[str, Any]] = ()) -> types.CallToolResult:
    public = _public(answers)
    text = _detached_text(pending_id) if status == "detached" else NEXT[status]
    if public:
        lines = []
        for a in public:
            chosen = "; ".join([*a["selected"], *([a["custom_text"]] if a["custom_text"] else [])])
            lines.append(f"- {a['question']} -> {chosen or '(no answer)'}")
        text = text + "\n" + "\n".join(lines)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"status": status, "pending_id": pending_id, "answers": public},
    )


def error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def turnwise_version() -> str:
    try:
        return metadata.version("turnwise")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


class KindResults(Protocol):
    """What `wait_for_answer` tells the agent, per kind of pending action: the questions' results
    (`McpEndpoint`) or Claude Code's verdicts (`Approvals`)."""

    def outcome(self, outcome: lc.WaitOutcome, bundle: Bundle) -> types.CallToolResult: ...

    def settled(self, pending_id: str, bundle: Bundle | None) -> types.CallToolResult: ...

    async def from_inbox(
        self, session_id: str, pending_id: str, item: Any, deliverable: bool
    ) -> types.CallToolResult: ...


# --- the endpoint -------------------------------------------------------------------------------


class McpEndpoint:
    """The ASGI app mounted at `/mcp`; `session_manager.run()` belongs in the app's lifespan."""

    def __init__(self, services: Services, authenticator: Authenticator) -> None:
        self.services = services
        self.authenticator = authenticator
        settings = services.deps.settings
        self.browsers = BrowserRule(settings)
        self.tools = tools(settings.max_wait_seconds)
        self.approvals = Approvals(services, session_for=self._session_for)
        self.arguments = ToolArguments(self.tools)
        self.server = TaskServer("turnwise", version=turnwise_version(), on_list_tools=self._list_tools)
        # `ToolArguments` checks the tools' schemas, its refusals naming fields as the agent spelled them.
        self.server.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        # Long waits as MCP tasks: a task-augmented call of either era, and the tasks/* methods.
        self.tasks = McpTaskEndpoint(self)
        self.tasks.register(self.server)
        self.server.extensions = {TASKS_EXTENSION: {}}
        self.session_manager = StreamableHTTPSessionManager(app=self.server, stateless=True)
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Run the session manager in a task of its own (its task group must be entered and left by
        one task, whichever tasks run the app's lifespan); returns once it accepts requests."""
        started = asyncio.Event()

        async def run() -> None:
            async with self.session_manager.run():
                started.set()
                await self._stop.wait()

        self._running = asyncio.create_task(run())
        ready = asyncio.create_task(started.wait())
        await asyncio.wait({self._running, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._running.done():
            await self._running  # raises what stopped it

    async def stop(self) -> None:
        if self._running is None:
            return
        self._stop.set()
        await self._running
        self._running = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = headers_of(scope)
        refused = self.browsers.refusal(headers)
        if refused is not None:
            log.warning("mcp browser request refused", extra={"event": "mcp.refused", "reason": refused})
            await JSONResponse({"error": refused}, status_code=403)(scope, receive, send)
            return
        try:
            principal = await self.authenticator.authenticate(
                bearer_from_header(headers.get("authorization"))
            )
        except Unauthenticated as exc:
            response = JSONResponse(
                {"error": str(exc)}, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="turnwise"'}
            )
            await response(scope, receive, send)
            return
        except Exception as exc:
            if not is_outage(exc):
                raise
            unavailable = JSONResponse(
                {"error": f"{Unavailable()} (retryable)"}, status_code=503, headers={"Retry-After": "1"}
            )
            await unavailable(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.session_manager.handle_request(scope, receive, send)

    async def _list_tools(
        self, _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    def principal(self, ctx: ServerRequestContext[Any, Any]) -> Principal:
        request = ctx.request
        scope = getattr(request, "scope", None)
        principal = scope.get(PRINCIPAL_KEY) if isinstance(scope, dict) else None
        if not isinstance(principal, Principal):
            raise Unauthenticated("missing bearer token")
        return principal

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        name, arguments = params.name, dict(params.arguments or {})
        if name not in TOOL_NAMES:
            message = mcp_adapter.unknown_tool(name, TOOL_NAMES)
            if self.services.deps.settings.mcp_adapter:
                # A request the server cannot serve at all: the protocol's error, not a failed tool's.
                raise MCPError(code=types.INVALID_PARAMS, message=message)
            return error(message)
        try:
            principal = self.principal(ctx)
        except Unauthenticated as exc:
            return error(str(exc))
        if self.tasks.wanted(ctx, name):
            return await self.tasks.start(ctx, principal, name, arguments, None)
        return await self.call(principal, name, arguments)

    async def call(self, principal: Principal, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """A known tool's plain call: its result, or a tool error (`isError`) naming what was refused."""
        try:
            bad = storable_paths(arguments, "")
            if bad:
                raise InvalidInput(bad[0], PROBLEM)
            self.arguments.check(name, arguments)
            if name == "ask_user_question":
                return await self.ask_user_question(principal, arguments)
            if name == "approve_tool_use":
                return await self.approvals.approve_tool_use(principal, arguments)
            return await self.wait_for_answer(principal, arguments)
        except TurnwiseError as exc:
            return error(str(exc))
        except Exception as exc:
            if not is_outage(exc):
                raise
            # The agent may call the tool again: nothing it could act on was decided.
            return error(f"{Unavailable()} (retryable)")

    # --- ask_user_question ------------------------------------------------------------------------

    async def _session_for(self, principal: Principal, requested: Any) -> str:
        session_id = requested or principal.session_id
        if not session_id:
            raise InvalidInput("session_id", "is required with a user or admin token")
        try:
            session = await self.services.reads.session(session_id)
        except NotFound:
            raise InvalidInput("session_id", f"session {session_id!r} not found") from None
        try:
            require_session_agent(principal, session.id, session.task_id)
        except NotFound:
            raise InvalidInput("session_id", f"session {session_id!r} not found") from None
        except Forbidden as exc:
            raise InvalidInput("session_id", str(exc)) from None
        return session.id

    async def ask_user_question(self, principal: Principal, args: dict[str, Any]) -> types.CallToolResult:
        questions = questions_for_service(args["questions"])
        timeout = timeout_arg(args)
        session_id = await self._session_for(principal, args.get("session_id"))
        return await self._wait(session_id, questions, args.get("context"), timeout)

    async def _wait(
        self, session_id: str, questions: list[dict[str, Any]], context: str | None, seconds: float | None
    ) -> types.CallToolResult:
        with in_tool_words():
            stream = self.services.pending.ask(session_id, questions, context, seconds)
            outcome, bundle = await final_outcome(stream)
        if outcome is None:
            raise RuntimeError("the clarification stream ended without an outcome")
        if bundle is None:
            raise BrokenInvariant("the clarification stream ended before it asked")
        return self.outcome(outcome, bundle)

    def outcome(self, outcome: lc.WaitOutcome, bundle: Bundle) -> types.CallToolResult:
        pending_id = bundle.pending_id
        if isinstance(outcome, lc.Answered):
            return result(
                "answered", pending_id, rendered_answers(_ordered_metadata(bundle), outcome.answers)
            )
        if isinstance(outcome, lc.Rejected):
            return result("rejected", pending_id)
        if isinstance(outcome, lc.Detached):
            return result("detached", pending_id)
        return result("closed", pending_id)

    # --- wait_for_answer --------------------------------------------------------------------------

    async def wait_for_answer(self, principal: Principal, args: dict[str, Any]) -> types.CallToolResult:
        pending_id: str = args["pending_id"]
        timeout = timeout_arg(args)
        lifecycle = self.services.pending
        wait = lifecycle.wait_seconds(timeout)
        # Authorized just below, where a foreign bundle reads as not found.
        bundle = await lifecycle.bundle(pending_id, authorize=trusted)
        if bundle is None:
            raise InvalidInput("pending_id", f"pending action {pending_id!r} not found")
        try:
            require_session_agent(principal, bundle.session_id, bundle.task_id)
        except TurnwiseError:
            raise InvalidInput("pending_id", f"pending action {pending_id!r} not found") from None
        # The same wait for both kinds; only what the agent is told differs.
        results: KindResults = self.approvals if bundle.kind == PendingActionKind.PERMISSION else self
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            queued = await self.services.inbox.for_bundle(pending_id)
            if queued is not None:
                return await results.from_inbox(bundle.session_id, pending_id, *queued)
            found = await lifecycle.bundle(pending_id, authorize=trusted)
            if found is None:
                return results.settled(pending_id, None)
            if found.state in (BundleState.ACTIVE_LIVE, BundleState.ACTIVE_DETACHED):
                # Wait again on that very request: never a new one (nor a rule's decision of one).
                remaining = max(deadline - loop.time(), 0.001)
                outcome = await lifecycle.wait_again(found, remaining)
                if outcome is not None:
                    return results.outcome(outcome, found)
                # It stopped being open as the waiter came: read it again.
            elif found.state != BundleState.DELIVERY_CLAIMED:
                return results.settled(pending_id, found)
            if loop.time() >= deadline:
                return results.outcome(lc.Detached(pending_id), found)
            # An answer is being delivered or queued right now: look again shortly.
            await asyncio.sleep(CLAIM_POLL_SECONDS)

    def settled(self, pending_id: str, bundle: Bundle | None) -> types.CallToolResult:
        """A question that takes no answer any more: gone, superseded or terminal."""
        if bundle is not None and bundle.state == BundleState.TERMINAL:
            statuses = Counter(r.status for r in bundle.rows if not r.is_pending)
            top = statuses.most_common(1)[0][0] if statuses else ""
            if top == ClarificationStatus.REJECTED:
                return result("rejected", pending_id)
            if top == ClarificationStatus.ANSWERED:
                return result("delivered", pending_id)
        return result("closed", pending_id)

    async def from_inbox(
        self, session_id: str, pending_id: str, item: Any, deliverable: bool
    ) -> types.CallToolResult:
        if item.delivered_at is not None:
            return result("delivered", pending_id)
        taken = await self.services.inbox.take(session_id, via="mcp", pending_id=pending_id)
        if taken:
            return result("answered", pending_id, taken[0].answers)
        if deliverable:  # another caller took it between the read and the take
            return result("delivered", pending_id)
        return result("closed", pending_id)
