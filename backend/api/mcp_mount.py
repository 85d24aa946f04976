"""`/mcp`, with the MCP SDK loaded on the endpoint's first request instead of at every start.

The official SDK and the types it brings (pydantic models for both protocol revisions) take about
0.6 s of a process's start, a third of `turnwise serve`'s import time, while many processes never
serve an MCP request (a worker behind a GraphQL-only client, a test server, `turnwise demo` before an
agent connects). So the mount imports `backend.api.mcp` in a worker thread when the first request
arrives (the event loop serves everything else meanwhile), builds and starts the endpoint once, and
hands every request to it; concurrent first requests wait for the same build. A build that fails
is logged, answered 503 with its reason, and tried again on the next request.
`TURNWISE_MCP_AT_START=1` builds it during startup instead (`bench startup` measures both ways).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from backend.api.auth import Authenticator
from backend.services.container import Services

if TYPE_CHECKING:
    from backend.api.mcp import McpEndpoint

log = logging.getLogger(__name__)


class LazyMcp:
    """The ASGI app mounted at `/mcp`: the endpoint of `backend/api/mcp.py`, built on first use."""

    def __init__(self, services: Services, authenticator: Authenticator) -> None:
        self.services = services
        self.authenticator = authenticator
        self._building: asyncio.Task[McpEndpoint] | None = None
        self._stopped = False

    async def endpoint(self) -> McpEndpoint:
        """The started endpoint, built by the first caller (the others wait for it)."""
        if self._stopped:
            raise RuntimeError("the MCP endpoint is shut down")
        building = self._building
        if building is None:
            building = self._building = asyncio.create_task(self._build())
        try:
            return await asyncio.shield(building)
        except Exception:
            if building.done() and self._building is building:
                self._building = None  # the next request tries again
            raise

    async def _build(self) -> McpEndpoint:
        module = await asyncio.to_thread(importlib.import_module, "backend.api.mcp")
        endpoint: McpEndpoint = module.McpEndpoint(self.services, self.authenticator)
        await endpoint.start()
        return endpoint

    async def stop(self) -> None:
        """Stop the endpoint if it was built (a build under way is awaited first)."""
        self._stopped = True
        building, self._building = self._building, None
        if building is None:
            return
        try:
            endpoint = await building
        except Exception:  # noqa: BLE001 - logged when it failed; nothing to stop
            return
        await endpoint.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            endpoint = await self.endpoint()
        except Exception as exc:
            log.exception("mcp endpoint could not start", extra={"event": "mcp.start_failed"})
            response = JSONResponse({"error": f"MCP endpoint unavailable: {exc}"}, status_code=503)
            await response(scope, receive, send)
            return
        await endpoint(scope, receive, send)
