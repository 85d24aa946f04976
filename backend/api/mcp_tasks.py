"""MCP tasks on `/mcp`: `ask_user_question` and `approve_tool_use` called as tasks, in both protocol eras.

A task-augmented call asks as the plain call does, but returns a task at once instead of holding the
request open; the client then polls for the person's answer as long as it takes. Two wires:

- 2025-11-25 (the handshake era): the client adds `task: {ttl}` to `tools/call` and gets
  `{task: {...}}`; `tasks/get` says `input_required` while the action waits for a person and
  `completed` (or `cancelled`) after; `tasks/result` waits for and returns exactly the plain call's
  result; `tasks/list` lists the caller's tasks; `tasks/cancel` cancels the pending action. The
  capability is `capabilities.tasks`, each tool's `execution.taskSupport` says it may be a task.
- 2026-07-28 (the Tasks extension, `io.modelcontextprotocol/tasks`): a client that declares the
  extension in a request's `_meta` gets `{resultType: "task", taskId, ...}` for those two tools (the
  server decides); `tasks/get` says `working` while a person has not answered and inlines the result
  once `completed`; `tasks/cancel` acknowledges with an empty result; `tasks/update` takes no input
  (these tools ask the person, never the client). `tasks/result` and `tasks/list` are not methods
  there. Without the extension declared, the task methods answer -32021 and calls run as plain calls.

Durable: a task is a row (`services/mcp_tasks.py`) naming its pending action and its owner (the
caller's user and session), so any process of any number, and a restarted server, answers for it.
Its status is read from the pending action each time; only the final result is stored, once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from backend.api.access import require_session_agent
from backend.api.auth import Principal
from backend.domain.lifecycle import Bundle, BundleState
from backend.domain.states import ClarificationStatus
from backend.repository.mcp_tasks import McpTaskRecord
from backend.services.container import Services
from backend.services.mcp_tasks import McpTasks
from backend.services.pending.core import trusted

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TASK_TOOLS = frozenset({"ask_user_question", "approve_tool_use"})
POLL_INTERVAL_MS = 1000
# The first wait of a task's call: long enough for a rule (or the identical open request) to decide it
# at once, short enough that the call returns its task without keeping the client waiting.
FIRST_WAIT_SECONDS = 0.05
# A result another process took just now is stored by it at once: wait that long for it.
TAKEN_GRACE_SECONDS = 2.0
LIST_PAGE = 100
OPEN = (BundleState.ACTIVE_LIVE, BundleState.ACTIVE_DETACHED)
MISSING_CAPABILITY = -32021


class Tools(Protocol):
    """What the tasks need of the endpoint (`api/mcp.py`): who calls, and the tools' plain calls."""

    services: Services

    def principal(self, ctx: ServerRequestContext[Any, Any]) -> Principal: ...

    async def call(
        self, principal: Principal, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult: ...


class TaskServer(Server[Any]):
    """The SDK's server, declaring the 2025-11-25 tasks capability on the handshake era (on the 2026
    wire the extension is declared under `capabilities.extensions` instead)."""

    def get_capabilities(
        self,
        notification_options: Any = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        if protocol_version in MODERN_PROTOCOL_VERSIONS:
            return capabilities
        tasks = types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )
        return capabilities.model_copy(update={"tasks": tasks})


class UpdateTaskParams(types.GetTaskRequestParams):
    input_responses: dict[str, Any] | None = None


def modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _wire(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _owner(principal: Principal) -> str:
    return f"{principal.user_id}/{principal.session_id or ''}"


def _unknown(task_id: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=f"unknown task {task_id!r}")


class McpTaskEndpoint:
    """The task side of `/mcp`: registered on the SDK's server by `register`."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        services = tools.services
        self.pending = services.pending
        self.store = McpTasks(services.deps, services.pending)

    def register(self, server: Server[Any]) -> None:
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._result)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self._list)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel)
        server.add_request_handler("tasks/update", UpdateTaskParams, self._update)
        # The 2025-11-25 task-augmented call answers `{task}`, which the SDK's result check for a
        # `tools/call` of that era refuses: answered here, before it (a middleware's own result).
        server.middleware.append(self._legacy_task_call)

    # --- starting a task ------------------------------------------------------------------------

    def wanted(self, ctx: ServerRequestContext[Any, Any], name: str) -> bool:
        """A 2026 call of a task tool from a client that declared the extension on this request."""
        if name not in TASK_TOOLS or not modern(ctx):
            return False
        declared = ctx.session.client_capabilities
        return declared is not None and TASKS_EXTENSION in (declared.extensions or {})

    async def _legacy_task_call(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        params = ctx.params
        if (
            ctx.method != "tools/call"
            or modern(ctx)
            or not isinstance(params, Mapping)
            or not params.get("task")
        ):
            return await call_next(ctx)
        try:
            call = types.CallToolRequestParams.model_validate(dict(params), by_name=False)
        except ValidationError:
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid request parameters") from None
        if call.name not in TASK_TOOLS:
            return await call_next(ctx)  # a tool that is never a task: called as it is
        principal = self.tools.principal(ctx)
        ttl = call.task.ttl if call.task is not None else None
        return await self.start(ctx, principal, call.name, dict(call.arguments or {}), ttl)

    async def start(
        self,
        ctx: ServerRequestContext[Any, Any],
        principal: Principal,
        name: str,
        arguments: dict[str, Any],
        ttl_ms: int | None,
    ) -> dict[str, Any]:
        """Ask as the plain call does, and return its task at once. A refused call (nothing written)
        is the plain call's tool error; a call decided at once is a task completed already."""
        asked = await self.tools.call(principal, name, {**arguments, "timeout_seconds": FIRST_WAIT_SECONDS})
        structured = asked.structured_content if isinstance(asked.structured_content, dict) else {}
        pending_id = structured.get("pending_id")
        if asked.is_error or not isinstance(pending_id, str):
            return _wire(asked)
        task = await self.store.create(
            owner=_owner(principal),
            session_id=str(arguments.get("session_id") or principal.session_id),
            pending_id=pending_id,
            tool=name,
            ttl_ms=self.store.ttl_ms(ttl_ms),
            # Anything but 'detached' is the call's final result (a rule allowed it, say).
            result=None if structured.get("status") == "detached" else _wire(asked),
        )
        status, _ = await self._status(task, principal)
        if modern(ctx):
            return {"resultType": "task", **self._task(ctx, task, status)}
        return {"task": self._task(ctx, task, status)}

    # --- status ---------------------------------------------------------------------------------

    async def _status(
        self, task: McpTaskRecord, principal: Principal, *, settle: bool = True
    ) -> tuple[str, dict[str, Any] | None]:
        """The task's status, read from its pending action, and its final result once there is one
        (stored the first time it is read, `settle`)."""
        if task.result is not None:
            return await self._final_status(task, task.result), task.result
        bundle = await self.pending.bundle(task.pending_id, authorize=trusted)
        if bundle is not None and bundle.state in OPEN:
            return "input_required", None
        if (bundle is not None and bundle.state == BundleState.DELIVERY_CLAIMED) or not settle:
            return "working", None
        result = await self._collect(task, principal, FIRST_WAIT_SECONDS)
        if result is None:
            return "working", None
        return await self._final_status(task, result, bundle), result

    async def _final_status(
        self, task: McpTaskRecord, result: dict[str, Any], bundle: Bundle | None = None
    ) -> str:
        structured = result.get("structuredContent")
        if not isinstance(structured, dict) or structured.get("status") != "closed":
            return "completed"
        if bundle is None:
            bundle = await self.pending.bundle(task.pending_id, authorize=trusted)
        statuses = Counter(r.status for r in bundle.rows) if bundle is not None else Counter()
        return "cancelled" if ClarificationStatus.CANCELLED in statuses else "completed"

    async def _collect(
        self, task: McpTaskRecord, principal: Principal, seconds: float
    ) -> dict[str, Any] | None:
        """The final result, stored once: collected as `wait_for_answer` collects it (waiting up to
        `seconds` while the action is open). None while the action is still open (or, for now,
        cannot be read)."""
        got = await self.tools.call(
            principal, "wait_for_answer", {"pending_id": task.pending_id, "timeout_seconds": seconds}
        )
        structured = got.structured_content if isinstance(got.structured_content, dict) else {}
        status = structured.get("status")
        if got.is_error or status == "detached":
            return None
        if status == "delivered":
            # Taken by another caller: a task's own result is stored by whoever took it, at once.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TAKEN_GRACE_SECONDS
            while loop.time() < deadline:
                stored = await self.store.get(task.id, task.owner)
                if stored is not None and stored.result is not None:
                    return stored.result
                await asyncio.sleep(0.1)
        stored = await self.store.complete(task, _wire(got))
        return stored.result

    def _task(self, ctx: ServerRequestContext[Any, Any], task: McpTaskRecord, status: str) -> dict[str, Any]:
        """A task as its era's wire has it (2026: a person elsewhere is `working`, the TTL `ttlMs`)."""
        updated = task.completed_at or task.created_at
        out: dict[str, Any] = {
            "taskId": task.id,
            "status": status,
            "createdAt": _iso(task.created_at),
            "lastUpdatedAt": _iso(updated),
        }
        if status == "input_required":
            out["statusMessage"] = "waiting for a person to answer"
        if modern(ctx):
            if status == "input_required":
                out["status"] = "working"
            out.update(ttlMs=task.ttl_ms, pollIntervalMs=POLL_INTERVAL_MS)
        else:
            out.update(ttl=task.ttl_ms, pollInterval=POLL_INTERVAL_MS)
        return out

    # --- the methods ----------------------------------------------------------------------------

    async def _task_of(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> tuple[McpTaskRecord, Principal]:
        """The caller's task by id (another caller's, or one past its ttl, is unknown)."""
        if modern(ctx):
            declared = ctx.session.client_capabilities
            if declared is None or TASKS_EXTENSION not in (declared.extensions or {}):
                raise MCPError(
                    code=MISSING_CAPABILITY,
                    message=f"the client did not declare the {TASKS_EXTENSION} extension",
                    data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
                )
        principal = self.tools.principal(ctx)
        task = await self.store.get(task_id, _owner(principal))
        if task is None:
            raise _unknown(task_id)
        return task, principal

    @staticmethod
    def _handshake_only(ctx: ServerRequestContext[Any, Any], method: str) -> None:
        if modern(ctx):
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=method)

    async def _get(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        task, principal = await self._task_of(ctx, params.task_id)
        status, result = await self._status(task, principal)
        out = self._task(ctx, task, status)
        if modern(ctx) and result is not None and status == "completed":
            out["result"] = result
        return out

    async def _result(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """Waits for the final result (as long as it takes) and returns it: the plain call's."""
        self._handshake_only(ctx, "tasks/result")
        task, principal = await self._task_of(ctx, params.task_id)
        longest = self.tools.services.deps.settings.max_wait_seconds
        while True:
            _, result = await self._status(task, principal)
            if result is not None:
                return {**result, "_meta": {**result.get("_meta", {}), RELATED_TASK: {"taskId": task.id}}}
            bundle = await self.pending.bundle(task.pending_id, authorize=trusted)
            if bundle is not None and bundle.state == BundleState.ACTIVE_DETACHED:
                # Nobody waits on it: wait as its live waiter (a person's answer comes straight here).
                await self._collect(task, principal, longest)
            else:  # another caller waits on it, or its answer is on its way: look again shortly
                await asyncio.sleep(POLL_INTERVAL_MS / 1000)
            task = await self.store.get(task.id, task.owner) or task

    async def _list(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        self._handshake_only(ctx, "tasks/list")
        principal = self.tools.principal(ctx)
        page = await self.store.list(_owner(principal), after=params.cursor, limit=LIST_PAGE)
        listed = []
        for task in page:
            status, _ = await self._status(task, principal, settle=False)
            listed.append(self._task(ctx, task, status))
        out: dict[str, Any] = {"tasks": listed}
        if len(page) == LIST_PAGE:
            out["nextCursor"] = page[-1].id
        return out

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        task, principal = await self._task_of(ctx, params.task_id)

        def authorize(task_id: str, session_id: str | None) -> None:
            require_session_agent(principal, session_id or task.session_id, task_id)

        status, _ = await self._status(task, principal, settle=False)
        if status in ("input_required", "working"):
            await self.store.cancel(task, authorize)
            status, _ = await self._status(task, principal)
        elif not modern(ctx):
            message = f"task {task.id!r} is already {status}: it cannot be cancelled"
            raise MCPError(code=types.INVALID_PARAMS, message=message)
        # 2026: an empty acknowledgement, for an open task and a settled one alike.
        return {} if modern(ctx) else self._task(ctx, task, status)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        """These tasks ask a person, never the client: an update has nothing to answer."""
        if not modern(ctx):
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data="tasks/update")
        await self._task_of(ctx, params.task_id)
        return {}
