"""Every undocumented name of Strawberry that the API relies on: here, and nowhere else.

Checked against (`CHECKED`): strawberry-graphql 0.341.2. The canary (`tests/api/test_strawberry_adapter.py`)
checks that each name of `RELIED_ON` still exists with the shape used here, exercises it over a real
WebSocket, and fails while the installed version differs from `CHECKED`, naming what to re-check.
`TURNWISE_WS_ADAPTER=0` (`Settings.ws_adapter`) turns all of it off: the view then uses Strawberry's
own handler, unchanged.

What it is for: a graphql-transport-ws connection waits for `connection_init` with a timer task
(`connection_init_wait_timeout`), which the handler cancels when the message comes and keeps for as
long as the connection lasts. A cancelled task keeps the CancelledError it ended with, and the
error's traceback keeps the frames of the wait (the sleep's future and timer handle with them): about
1.2 KB a connection, for hours, on a process holding ten thousand idle phones and tabs. The handler
here reads that error back once the task has ended, which drops it (what `Task.result()` does with a
cancelled task's error), and everything it kept goes with it. Nothing else changes: the timeout, the
acknowledgement and every message are Strawberry's.

The names, and why there is no public way:

- `AsyncBaseHTTPView.graphql_transport_ws_handler_class` (undocumented, not underscored): the class
  of the handler a view runs per graphql-transport-ws connection. No documented hook is called with
  the handler or its timer task.
- `BaseGraphQLTransportWSHandler.handle_connection_init(self, message)` (undocumented, not
  underscored): where the timer task is cancelled; extended, never replaced.
- `BaseGraphQLTransportWSHandler.connection_init_timeout_task` (undocumented instance attribute):
  the timer task.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

# The library versions the names below were read and checked against.
CHECKED = {"strawberry-graphql": "0.341.2"}


@dataclass(frozen=True, slots=True)
class Reliance:
    """One name relied on: `owner` ("module:Class"), the attribute, what it must be (`coroutine`,
    `attribute`, `instance attribute`: assigned by the class's `__init__`), and for a coroutine the
    leading parameter names."""

    library: str
    owner: str
    name: str
    kind: str
    parameters: tuple[str, ...] = ()


_HANDLERS = "strawberry.subscriptions.protocols.graphql_transport_ws.handlers:BaseGraphQLTransportWSHandler"

RELIED_ON: tuple[Reliance, ...] = (
    Reliance(
        "strawberry-graphql",
        "strawberry.http.async_base_view:AsyncBaseHTTPView",
        "graphql_transport_ws_handler_class",
        "attribute",
    ),
    Reliance("strawberry-graphql", _HANDLERS, "handle_connection_init", "coroutine", ("self", "message")),
    Reliance("strawberry-graphql", _HANDLERS, "connection_init_timeout_task", "instance attribute"),
)


def installed_versions() -> dict[str, str]:
    return {name: version(name) for name in CHECKED}


def _drop_cancellation(task: asyncio.Task[Any]) -> None:
    """A cancelled task hands its CancelledError back once; reading it drops the task's own reference,
    and with it the traceback and the frames of the wait."""
    if task.cancelled():
        with contextlib.suppress(asyncio.CancelledError):
            task.result()


def transport_ws_handler(base: type[Any]) -> type[Any]:
    """`base` (a view's graphql-transport-ws handler class), whose connections do not keep their
    cancelled `connection_init` timer for as long as they last."""

    class ReleasingInitTimer(base):  # type: ignore[misc]
        async def handle_connection_init(self, message: Any) -> None:
            await super().handle_connection_init(message)
            timer = self.connection_init_timeout_task
            if isinstance(timer, asyncio.Task):
                timer.add_done_callback(_drop_cancellation)

    ReleasingInitTimer.__name__ = ReleasingInitTimer.__qualname__ = f"ReleasingInitTimer{base.__name__}"
    return ReleasingInitTimer


def use_in(view: Any) -> None:
    """Make `view` (a Strawberry view) run its graphql-transport-ws connections with the handler above."""
    view.graphql_transport_ws_handler_class = transport_ws_handler(view.graphql_transport_ws_handler_class)
