"""The Starlette application: lifespan (migrate, epoch, startup sequence), health, GraphQL, MCP, web app."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from backend import faults, logs, metrics
from backend.api import strawberry_adapter
from backend.api.auth import Authenticator
from backend.api.browsers import BrowserRule, GuardedWebSockets
from backend.api.graphql_view import GraphQLView
from backend.api.mcp_mount import LazyMcp
from backend.api.schema import build_schema
from backend.api.web import web_routes
from backend.bus import EventBus
from backend.config import Settings
from backend.db import migrate
from backend.db.engine import STORAGE_ERRORS, Database, PoolerNotSet
from backend.repository import meta
from backend.services import startup
from backend.services.container import Services
from backend.services.context import Deps

log = logging.getLogger("turnwise.app")


class SchemaNotCurrent(RuntimeError):
    """The database's migrations are behind this code's and the server may not migrate them."""


# Startup failures whose message says everything an operator needs (what is wrong, which setting or
# command mends it): one line, no traceback. A startup step's failure was logged with its traceback
# where it failed (`services/startup.py`); anything else is logged with its traceback here.
SAID_IN_ONE_LINE: tuple[type[Exception], ...] = (PoolerNotSet, SchemaNotCurrent, startup.StartupFailed)


@dataclass
class Runtime:
    settings: Settings
    services: Services
    ready: bool = False
    epoch: int = 0
    # Why startup stopped, for `turnwise serve` to report and exit non-zero.
    failure: str | None = None


GRAPHQL_PATH = "/graphql"


def route_path(scope: Scope) -> str:
    """The path a route matches: the scope's path without the application's root path (as
    Starlette's router reads it)."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    rest = path[len(root) :]
    return rest if rest == "" or rest.startswith("/") else path


class TurnwiseApp(Starlette):
    """Starlette, except that a WebSocket handshake at `/graphql` goes to its endpoint directly.

    Every layer an ASGI call passes through stays on the stack for as long as the connection lasts:
    a WebSocket at `/graphql` (a phone or tab watching `pendingActionChanged`, ten thousand on one
    process) kept Starlette's error and exception middleware, the request metrics, the router and
    the route alive, about 3 KB a connection, and each message it sent went through their wrappers.
    None of them does anything for a WebSocket (the metrics time HTTP requests, the error middleware
    answers HTTP only, and nothing on this path raises the exceptions Starlette maps to a close), so
    the handshake goes straight to the same endpoint the route names; every other scope, and a
    WebSocket at any other path, goes through Starlette as before."""

    def __init__(self, *args: Any, graphql_websocket: ASGIApp, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.graphql_websocket = graphql_websocket

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and route_path(scope) == GRAPHQL_PATH:
            scope["app"] = self
            await self.graphql_websocket(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def tune_collector() -> None:
    """For a server process, once its application is built: move everything alive so far (modules,
    schema, engine) out of the cyclic collector's reach, and collect young objects in larger batches.
    With a thousand live subscriptions the default thresholds ran a full collection every few
    deliveries, each a pause of hundreds of milliseconds in the fan-out."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _storage(settings: Settings) -> tuple[Database, EventBus]:
    db = Database(
        settings.database_url,
        pool_size=settings.db_pool_size,
        connect_timeout=settings.db_connect_timeout_seconds,
        statement_timeout=settings.db_statement_timeout_seconds,
        fast_path=settings.db_fast_path,
        pooler=settings.db_pooler,
    )
    metrics.instrument(db)
    bus = EventBus(
        settings.broadcast_url,
        ping_seconds=settings.bus_ping_seconds,
        silence_seconds=settings.bus_silence_seconds,
        publish_seconds=settings.bus_publish_seconds,
        namespace=settings.bus_namespace,
    )
    return db, bus


def _lifespan(
    runtime: Runtime,
    mcp: LazyMcp,
    *,
    auto_migrate: bool,
    after_start: Callable[[Services], Awaitable[None]] | None,
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """Startup (migrate, epoch, the startup sequence) and shutdown in reverse (MCP first, if it was
    ever built: `backend/api/mcp_mount.py`)."""
    services, settings = runtime.services, runtime.settings
    db, bus = services.deps.db, services.deps.bus

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            if auto_migrate:
                await migrate.upgrade(db, url=settings.migrate_database_url)
            elif not await migrate.is_current(db):
                raise SchemaNotCurrent("database schema is not current: run `turnwise migrate`")
            async with db.write() as conn:
                runtime.epoch = await meta.advance_epoch(conn)
            # Connected to publish recovery's events; nothing subscribes before recovery finished.
            await bus.connect()
            # The whole order lives in backend/services/startup.py; a failing step stops startup.
            await startup.start(services, then=after_start)
            if settings.mcp_at_start:
                await mcp.endpoint()
        except Exception as exc:
            runtime.failure = str(exc)
            if not isinstance(exc, SAID_IN_ONE_LINE):
                log.exception("startup failed", extra={"event": "startup.failed"})
            await bus.disconnect()
            await db.dispose()
            raise
        runtime.ready = True
        log.info(
            "turnwise ready",
            extra={
                "event": "startup.ready",
                "epoch": runtime.epoch,
                "url": f"http://{settings.host}:{settings.port}",
            },
        )
        try:
            yield
        finally:
            runtime.ready = False
            try:
                await mcp.stop()
            except Exception:
                log.exception("mcp endpoint stop failed")
            await startup.stop(services)
            await bus.disconnect()
            await db.dispose()

    return lifespan


def _probes(runtime: Runtime) -> list[Route]:
    """`/healthz` (the process answers), `/readyz` (it can serve) and `/metrics`."""
    db, bus = runtime.services.deps.db, runtime.services.deps.bus

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        problems = []
        if not runtime.ready:
            problems.append("startup not finished")
        try:
            if not await migrate.is_current(db):
                problems.append("migrations not current")
        except STORAGE_ERRORS as exc:  # the database itself is unreachable
            problems.append(f"database unreachable: {type(exc).__name__}")
        if problems:
            return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
        # `instance`: which server process answered (one per worker of `turnwise serve --workers N`).
        # `bus`: connected / reconnecting and how often it came back. A reconnecting bus does not
        # make the process unready: it serves reads and writes, and every process shares the bus.
        return JSONResponse(
            {
                "status": "ready",
                "epoch": runtime.epoch,
                "instance": runtime.services.deps.instance_id,
                "bus": bus.status(),
            }
        )

    async def metrics_page(_: Request) -> Response:
        await runtime.services.needs_you.refresh_gauges()
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    return [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics_page)]


def _graphql_view(settings: Settings, services: Services, authenticator: Authenticator) -> GraphQLView:
    view = GraphQLView(
        services,
        authenticator,
        schema=build_schema(
            max_depth=settings.max_query_depth,
            max_bytes=settings.max_query_bytes,
            adapter=settings.ws_adapter,
            plain_fields=settings.graphql_core_adapter,
        ),
        graphql_ide="graphiql",
        allowed_origins=settings.allowed_origins,
        max_subscriptions_per_connection=settings.subscriptions_per_connection,
        allow_queries_via_get=False,
    )
    if settings.ws_adapter:
        strawberry_adapter.use_in(view)
    return view


def create_app(
    settings: Settings,
    *,
    auto_migrate: bool = True,
    after_start: Callable[[Services], Awaitable[None]] | None = None,
) -> Starlette:
    """The app; `after_start` runs as the last startup step, before readiness (the demo's seed)."""
    db, bus = _storage(settings)
    services = Services.build(Deps(db=db, bus=bus, settings=settings))
    runtime = Runtime(settings=settings, services=services)
    faults.configure(settings.fault_points)
    token = settings.bootstrap_token
    authenticator = Authenticator(token.get_secret_value() if token else None, services.access)
    mcp = LazyMcp(services, authenticator)
    view = _graphql_view(settings, services, authenticator)
    graphql_websocket = GuardedWebSockets(view.websocket, BrowserRule(settings))
    app = TurnwiseApp(
        routes=[
            *_probes(runtime),
            Route(GRAPHQL_PATH, view, methods=["GET", "POST"]),
            WebSocketRoute(GRAPHQL_PATH, graphql_websocket),
            Route("/mcp", mcp),
            *web_routes(),
        ],
        lifespan=_lifespan(runtime, mcp, auto_migrate=auto_migrate, after_start=after_start),
        middleware=[Middleware(metrics.RequestMetrics)],
        graphql_websocket=graphql_websocket,
    )
    app.state.runtime = runtime
    return app


def create_app_from_env() -> Starlette:
    """The app of one worker of `turnwise serve --workers N`: settings from TURNWISE_*."""
    logs.configure(getattr(logging, (os.environ.get("TURNWISE_LOG_LEVEL") or "info").upper(), logging.INFO))
    return create_app(Settings.from_env())
