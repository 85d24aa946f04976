"""GraphQL transport in the browser: queries over ``fetch``, subscriptions over graphql-transport-ws."""

# Runs under MicroPython in PyScript only; the ``pyscript`` import fails anywhere else.

import asyncio
import json

from pyscript import window  # type: ignore[import-not-found]
from pyscript.ffi import create_proxy  # type: ignore[import-not-found]

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


class GraphQLError(Exception):
    """The server answered with ``errors`` (or a non-JSON failure); ``code`` from the first one."""

    def __init__(self, message: str, code: str | None = None, status: int = 200) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class Unauthorized(GraphQLError):
    """HTTP 401: the stored token is missing, wrong or revoked."""


def _js_object(value: Any) -> Any:
    # JSON round trip: one conversion that behaves the same under MicroPython and Pyodide.
    return window.JSON.parse(json.dumps(value))


def _first_error(errors: Any) -> tuple[str, str | None]:
    first = errors[0] if errors else {}
    extensions = first.get("extensions") or {}
    return (str(first.get("message") or "request failed"), extensions.get("code"))


class Http:
    """POST /graphql with ``Authorization: Bearer``; ``abort`` is a kit ``AbortSignal`` or None."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token

    async def query(self, document: str, variables: Any = None, abort: Any = None) -> Any:
        options = _js_object(
            {
                "method": "POST",
                "headers": {
                    "Content-Type": "application/json",
                    "Authorization": "Bearer " + self.token,
                },
                "body": json.dumps({"query": document, "variables": variables or {}}),
            }
        )
        if abort is not None:
            controller = window.AbortController.new()
            abort.add_listener(lambda: controller.abort())
            options.signal = controller.signal
        response = await window.fetch(self.url, options)
        status = int(response.status)
        text = await response.text()
        if status == 401:
            raise Unauthorized("the token was not accepted", "UNAUTHENTICATED", status)
        try:
            body = json.loads(text)
        except ValueError:
            raise GraphQLError("HTTP " + str(status), None, status) from None
        if body.get("errors"):
            message, code = _first_error(body["errors"])
            raise GraphQLError(message, code, status)
        if status != 200:
            raise GraphQLError("HTTP " + str(status), None, status)
        return body.get("data")


class _Subscription:
    def __init__(self, sub_id: str, document: str, variables: Any, on_next: Any, on_error: Any) -> None:
        self.id = sub_id
        self.document = document
        self.variables = variables
        self.on_next = on_next
        self.on_error = on_error


class Socket:
    """One graphql-transport-ws connection that reconnects and resubscribes by itself.

    The token goes in ``connection_init`` (browsers cannot set WebSocket headers). Subscriptions
    send a snapshot first, so after a reconnect resubscribing converges without replay;
    ``on_reconnect`` lets the app re-read what has no subscription (the task list).
    """

    def __init__(self, url: str, token: str, on_reconnect: Callable[[], None] | None = None) -> None:
        self.url = url
        self.token = token
        self.on_reconnect = on_reconnect
        self.ws: Any = None
        self.acked = False
        self.closed = False
        self.connections = 0
        self._subs: dict[str, _Subscription] = {}
        self._next_id = 0
        self._retry = 0
        self._handlers: list[Any] = []
        self._retry_task: Any = None

    def start(self) -> None:
        self._connect()

    def subscribe(
        self,
        document: str,
        variables: Any,
        on_next: Callable[[Any], None],
        on_error: Callable[[str], None] | None = None,
    ) -> str:
        """Start a subscription (now, or once connected); returns its id for ``unsubscribe``."""
        self._next_id += 1
        sub = _Subscription("s" + str(self._next_id), document, variables, on_next, on_error)
        self._subs[sub.id] = sub
        if self.acked:
            self._send_subscribe(sub)
        return sub.id

    def unsubscribe(self, sub_id: str | None) -> None:
        if sub_id is None or sub_id not in self._subs:
            return
        del self._subs[sub_id]
        if self.acked:
            self._send({"id": sub_id, "type": "complete"})

    def close(self) -> None:
        self.closed = True
        if self.ws is not None:
            self.ws.close()

    # --- internals ---------------------------------------------------------------------------

    def _connect(self) -> None:
        if self.closed:
            return
        self.acked = False
        ws = window.WebSocket.new(self.url, "graphql-transport-ws")
        self.ws = ws
        # Proxies must outlive this call; the old socket's handlers are dropped with it.
        on_open = create_proxy(lambda _event: self._on_open(ws))
        on_message = create_proxy(lambda event: self._on_message(ws, event.data))
        on_close = create_proxy(lambda _event: self._on_close(ws))
        self._handlers = [on_open, on_message, on_close]
        ws.onopen = on_open
        ws.onmessage = on_message
        ws.onclose = on_close

    def _send(self, message: Any) -> None:
        if self.ws is not None:
            self.ws.send(json.dumps(message))

    def _send_subscribe(self, sub: _Subscription) -> None:
        self._send(
            {
                "id": sub.id,
                "type": "subscribe",
                "payload": {"query": sub.document, "variables": sub.variables or {}},
            }
        )

    def _on_open(self, ws: Any) -> None:
        if ws is not self.ws:
            return
        self._send({"type": "connection_init", "payload": {"token": self.token}})

    def _on_message(self, ws: Any, data: Any) -> None:
        if ws is not self.ws:
            return
        try:
            message = json.loads(str(data))
        except ValueError:
            return
        kind = message.get("type")
        if kind == "connection_ack":
            self.acked = True
            self._retry = 0
            self.connections += 1
            for sub in list(self._subs.values()):
                self._send_subscribe(sub)
            if self.connections > 1 and self.on_reconnect is not None:
                self.on_reconnect()
        elif kind == "ping":
            self._send({"type": "pong"})
        elif kind == "next":
            target = self._subs.get(message.get("id"))
            payload = message.get("payload") or {}
            if target is None:
                return
            if payload.get("errors"):
                self._fail(target, _first_error(payload["errors"])[0])
            elif payload.get("data") is not None:
                target.on_next(payload["data"])
        elif kind == "error":
            failed = self._subs.get(message.get("id"))
            if failed is not None:
                self._fail(failed, _first_error(message.get("payload") or [])[0])
        elif kind == "complete":
            self._subs.pop(message.get("id"), None)

    def _fail(self, sub: _Subscription, text: str) -> None:
        # A subscription the server refuses is not retried on this connection (it would refuse
        # again); it is sent again after a reconnect, when the server may have changed.
        window.console.warn("subscription " + sub.id + " failed: " + text)
        if sub.on_error is not None:
            sub.on_error(text)

    def _on_close(self, ws: Any) -> None:
        if ws is not self.ws:
            return
        self.acked = False
        self.ws = None
        if self.closed:
            return
        delay = min(0.25 * (2**self._retry), 5.0)
        self._retry += 1
        self._retry_task = asyncio.create_task(self._reconnect_later(delay))

    async def _reconnect_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.ws is None:
            self._connect()
