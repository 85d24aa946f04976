"""What the browser test modules share: their servers, the locators they look at, the socket relay."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from tests.dialects import served
from tests.e2e.webapp import Network
from tests.servers import Server


def serve(
    dialect: str, request: pytest.FixtureRequest | None = None, *, dispatch_seconds: int = 5
) -> Iterator[Server]:
    """A server on a fresh ``dialect`` database (PostgreSQL skips unless reachable, given the
    fixture's ``request``); a resume dispatch waits ``dispatch_seconds`` for the runner's
    acknowledgement."""
    with served(dialect, request, env={"TURNWISE_DISPATCH_SECONDS": str(dispatch_seconds)}) as server:
        yield server


def by_dialect(request: pytest.FixtureRequest, sqlite: str, postgresql: str) -> Server:
    """The server fixture named for the dialect the requesting fixture is parametrized with."""
    return request.getfixturevalue(sqlite if request.param == "sqlite" else postgresql)  # type: ignore[no-any-return]


def card(page: Any) -> Any:
    return page.get_by_test_id("clarification-card")


def question_icon(page: Any, task_id: str) -> Any:
    return page.get_by_test_id(f"task-row-{task_id}").get_by_test_id("task-question-icon")


def no_outside_requests(network: Network) -> None:
    assert network.outside == [], "the page tried to load something from outside the local server"


class Waiting(Protocol):
    """An agent's call still held open: a question, or a permission request."""

    async def disconnect(self) -> None: ...


async def wrap_up(network: Network, *agents: Waiting) -> None:
    """Disconnect the agents still waiting; the page loaded nothing from outside the local server."""
    for agent in agents:
        await agent.disconnect()
    no_outside_requests(network)


async def reload_app(page: Any) -> None:
    await page.reload()
    await page.wait_for_selector("html[data-ready=true]", state="attached")


class Relay:
    """Relays the app's GraphQL socket; while ``cut`` is set the page hears nothing from the server.

    ``connections`` are the page's sockets in the order it opened them; ``withheld`` is set once the
    server sent an event (a ``next`` message) the page did not hear.
    """

    def __init__(self) -> None:
        self.connections: list[Any] = []
        self.cut = asyncio.Event()
        self.withheld = asyncio.Event()

    async def install(self, page: Any) -> Relay:
        await page.route_web_socket("**/graphql", self.route)
        return self

    async def route(self, ws: Any) -> None:
        server = ws.connect_to_server()
        self.connections.append(ws)
        server.on_message(lambda message: self._forward(ws, message))

    def _forward(self, ws: Any, message: Any) -> None:
        if not self.cut.is_set():
            ws.send(message)
        elif '"next"' in str(message):
            self.withheld.set()

    async def reconnect(self) -> None:
        """Hear the server again, on a new socket: the first one closes and the app reconnects."""
        self.cut.clear()
        await self.connections[0].close()
