"""The Starlette application: lifespan (migrate, epoch, recovery, bus), health, GraphQL, MCP, web app."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute

from backend import faults
from backend.api.auth import Authenticator
from backend.api.graphql_view import GraphQLView
from backend.api.mcp import McpEndpoint
from backend.api.schema import build_schema
from backend.api.web import web_routes
from backend.config import Settings
from backend.db import migrate
from backend.db.engine import Database
from backend.events import EventBus
from backend.repository import meta
from backend.services.container import Services
from backend.services.context import Deps

log = logging.getLogger("turnwise.app")

StartupStep = Callable[[Services], Awaitable[None]]


@dataclass
class Runtime:
    settings: Settings
    services: Services
    ready: bool = False
    epoch: int = 0
    startup_steps: list[StartupStep] = field(default_factory=list)
    # Run in reverse order when the server stops, before the bus and the database close.
    shutdown_steps: list[StartupStep] = field(default_factory=list)


async def _start_clarifications(services: Services) -> None:
    await services.recovery.run()
    await services.waiters.start()


async def _stop_clarifications(services: Services) -> None:
    await services.waiters.stop()


async def _start_resume(services: Services) -> None:
    # Step 3 of recovery, after reservations and delivery intents: replay missed start events.
    await services.resume_recovery.replay_outbox()
    await services.watchdogs.start()


async def _stop_resume(services: Services) -> None:
    await services.watchdogs.stop()


def create_app(settings: Settings, *, auto_migrate: bool = True) -> Starlette:
    db = Database(settings.database_url)
    bus = EventBus(settings.broadcast_url)
    services = Services.build(Deps(db=db, bus=bus, settings=settings))
    runtime = Runtime(settings=settings, services=services)
    faults.configure(settings.fault_points)
    # Clarification claims and orphaned waiters are recovered before the waiter hub takes hand-offs.
    runtime.startup_steps.append(_start_clarifications)
    runtime.shutdown_steps.append(_stop_clarifications)
    runtime.startup_steps.append(_start_resume)
    runtime.shutdown_steps.append(_stop_resume)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if auto_migrate:
            await migrate.upgrade(db)
        elif not await migrate.is_current(db):
            raise RuntimeError("database schema is not current: run `turnwise migrate`")
        async with db.write() as conn:
            runtime.epoch = await meta.advance_epoch(conn)
        await bus.connect()
        # One bus subscription per channel for the whole process; subscriptions fan out from it.
        await services.live.start()
        try:
            # Recovery runs before the server admits traffic; an error stops startup.
            for step in runtime.startup_steps:
                await step(services)
            await mcp.start()
            runtime.ready = True
            log.info("turnwise ready", extra={"epoch": runtime.epoch})
            yield
        finally:
            runtime.ready = False
            try:
                await mcp.stop()
            except Exception:
                log.exception("mcp endpoint stop failed")
            for stop in reversed(runtime.shutdown_steps):
                try:
                    await stop(services)
                except Exception:
                    log.exception("shutdown step failed")
            await services.live.stop()
            await bus.disconnect()
            await db.dispose()

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        problems = []
        if not runtime.ready:
            problems.append("startup not finished")
        try:
            if not await migrate.is_current(db):
                problems.append("migrations not current")
        except Exception as exc:  # the database itself is unreachable
            problems.append(f"database unreachable: {type(exc).__name__}")
        if problems:
            return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ready", "epoch": runtime.epoch})

    authenticator = Authenticator(settings.bootstrap_token, services.access)
    mcp = McpEndpoint(services, authenticator)
    view = GraphQLView(
        services,
        authenticator,
        schema=build_schema(max_depth=settings.max_query_depth, max_bytes=settings.max_query_bytes),
        graphql_ide="graphiql",
        allowed_origins=settings.allowed_origins,
        max_subscriptions_per_connection=settings.subscriptions_per_connection,
        allow_queries_via_get=False,
    )
    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/graphql", view, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", view),
            Route("/mcp", mcp),
            *web_routes(),
        ],
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    return app
