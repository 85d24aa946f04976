"""GraphQL over HTTP (queries, mutations) and graphql-transport-ws (subscriptions), on `websockets`.

`Connection` is the one graphql-transport-ws implementation: `connection_init` with the token, then
any number of subscriptions multiplexed by id, pings answered. `GraphQLTransport.subscribe` opens a
connection per subscription (the server ends a subscription's connection with it, and a client that
loses one reconnects only that stream); tests and benchmarks use `Connection` directly for several
subscriptions on one socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

PROTOCOL = websockets.Subprotocol("graphql-transport-ws")


class GraphQLRequestError(RuntimeError):
    """The server answered with GraphQL errors (bad input, access, state); not a transport failure."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(json.dumps(errors))
        self.errors = errors

    @property
    def codes(self) -> list[str | None]:
        return [(e.get("extensions") or {}).get("code") for e in self.errors]


class ConnectionRefused(ConnectionError):
    """The server did not acknowledge `connection_init` (a missing or rejected token)."""


_CLOSED = object()


class Subscription:
    """One operation on a connection: `next()` returns each result's data in order."""

    def __init__(self, connection: Connection, sub_id: str) -> None:
        self.connection = connection
        self.id = sub_id
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()

    async def next(self, timeout: float | None = None) -> dict[str, Any]:  # noqa: ASYNC109
        """The next result's data. Raises GraphQLRequestError on errors, StopAsyncIteration when the
        server completed the operation, ConnectionError when the connection ended, TimeoutError."""
        message = await asyncio.wait_for(self._inbox.get(), timeout)
        if message is _CLOSED:
            self._inbox.put_nowait(_CLOSED)
            raise ConnectionError("the connection closed")
        kind = message.get("type")
        if kind == "next":
            payload = message.get("payload") or {}
            if payload.get("errors"):
                raise GraphQLRequestError(list(payload["errors"]))
            return dict(payload.get("data") or {})
        if kind == "error":
            raise GraphQLRequestError(list(message.get("payload") or []))
        raise StopAsyncIteration

    def deliver(self, message: dict[str, Any]) -> None:
        """Queue a message the connection received for this operation (`next`, `error`, `complete`)."""
        self._inbox.put_nowait(message)

    def connection_closed(self) -> None:
        """The connection ended: `next()` raises ConnectionError once the queued messages are read."""
        self._inbox.put_nowait(_CLOSED)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._results()

    async def _results(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            try:
                yield await self.next()
            except StopAsyncIteration:
                return

    async def complete(self) -> None:
        """Stop the operation (the server ends its resolver)."""
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.connection.ws.send(json.dumps({"id": self.id, "type": "complete"}))
        self.connection.subscriptions.pop(self.id, None)


class Connection:
    def __init__(self, ws: ClientConnection, on_result: Callable[[str], None] | None = None) -> None:
        self.ws = ws
        # When set, results are counted here (by subscription id) instead of queued: for listeners
        # that only need to know that something arrived (fan-out measurements).
        self.on_result = on_result
        self.subscriptions: dict[str, Subscription] = {}
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        ws_url: str,
        token: str | None,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        max_queue: int | None = 16,
        ack_seconds: float = 10.0,
        on_result: Callable[[str], None] | None = None,
    ) -> Connection:
        """Connect and initialize; `params` replaces the default `{"token": token}` payload."""
        ws = await websockets.connect(
            ws_url, subprotocols=[PROTOCOL], additional_headers=dict(headers or {}), max_queue=max_queue
        )
        payload = dict(params) if params is not None else ({"token": token} if token else {})
        try:
            await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
            ack = json.loads(await asyncio.wait_for(ws.recv(), ack_seconds))
            if ack.get("type") != "connection_ack":
                raise ConnectionRefused(f"connection refused: {ack}")
        except (websockets.ConnectionClosed, ConnectionRefused) as exc:
            await ws.close()
            raise ConnectionRefused(str(exc)) from exc
        except BaseException:
            await ws.close()
            raise
        connection = cls(ws, on_result)
        connection._reader = asyncio.create_task(connection._read())
        return connection

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                message = json.loads(raw)
                kind = message.get("type")
                if kind == "ping":
                    await self.ws.send(json.dumps({"type": "pong"}))
                    continue
                sub = self.subscriptions.get(str(message.get("id")))
                if sub is None:
                    continue
                if kind == "next" and self.on_result is not None:
                    self.on_result(sub.id)
                    continue
                sub.deliver(message)
                if kind in ("error", "complete"):
                    self.subscriptions.pop(sub.id, None)
        except websockets.ConnectionClosed:
            pass
        finally:
            for sub in list(self.subscriptions.values()):
                sub.connection_closed()
            self.subscriptions.clear()

    async def subscribe(self, query: str, variables: Mapping[str, Any] | None = None) -> Subscription:
        sub = Subscription(self, str(next(self._ids)))
        self.subscriptions[sub.id] = sub
        payload = {"query": query, "variables": dict(variables or {})}
        await self.ws.send(json.dumps({"id": sub.id, "type": "subscribe", "payload": payload}))
        return sub

    async def close(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


class GraphQLTransport:
    def __init__(self, base_url: str, token: str | None, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.ws_url = self.base_url.replace("http", "ws", 1) + "/graphql"
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def raw(self, query: str, variables: Mapping[str, Any] | None = None) -> httpx.Response:
        return await self.http.post("/graphql", json={"query": query, "variables": dict(variables or {})})

    async def execute(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        response = await self.raw(query, variables)
        body = response.json()
        if body.get("errors"):
            raise GraphQLRequestError(list(body["errors"]))
        response.raise_for_status()
        return dict(body["data"])

    async def connect(self, *, params: Mapping[str, Any] | None = None, **options: Any) -> Connection:
        return await Connection.open(self.ws_url, self.token, params=params, **options)

    @contextlib.asynccontextmanager
    async def subscription(
        self,
        query: str,
        variables: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[Subscription]:
        """One operation on a connection of its own, closed when the block ends."""
        async with await self.connect(params=params) as connection:
            yield await connection.subscribe(query, variables)

    @contextlib.asynccontextmanager
    async def subscribe(
        self, query: str, variables: Mapping[str, Any] | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Yields the stream of results' data; it ends when the server completes the operation."""
        async with self.subscription(query, variables) as sub:
            yield aiter(sub)
