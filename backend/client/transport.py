"""GraphQL over HTTP (queries, mutations) and graphql-transport-ws (subscriptions), on `websockets`.

One WebSocket per subscription: the server ends a subscription's connection with it, and a client
that loses one reconnects only that stream.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import websockets

PROTOCOL = websockets.Subprotocol("graphql-transport-ws")


class GraphQLRequestError(RuntimeError):
    """The server answered with GraphQL errors (bad input, access, state); not a transport failure."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(json.dumps(errors))
        self.errors = errors

    @property
    def codes(self) -> list[str | None]:
        return [(e.get("extensions") or {}).get("code") for e in self.errors]


class GraphQLTransport:
    def __init__(self, base_url: str, token: str | None, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.ws_url = self.base_url.replace("http", "ws", 1) + "/graphql"
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)
        self._ids = itertools.count(1)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.http.post("/graphql", json={"query": query, "variables": variables or {}})
        body = response.json()
        if body.get("errors"):
            raise GraphQLRequestError(list(body["errors"]))
        response.raise_for_status()
        return dict(body["data"])

    @contextlib.asynccontextmanager
    async def subscribe(
        self, query: str, variables: dict[str, Any] | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Yields the stream of `next` payloads' data; it ends when the server completes it."""
        async with websockets.connect(self.ws_url, subprotocols=[PROTOCOL]) as ws:
            await ws.send(
                json.dumps(
                    {"type": "connection_init", "payload": {"token": self.token} if self.token else {}}
                )
            )
            ack = json.loads(await ws.recv())
            if ack.get("type") != "connection_ack":
                raise ConnectionError(f"connection refused: {ack}")
            sub_id = str(next(self._ids))
            await ws.send(
                json.dumps(
                    {
                        "id": sub_id,
                        "type": "subscribe",
                        "payload": {"query": query, "variables": variables or {}},
                    }
                )
            )

            async def results() -> AsyncIterator[dict[str, Any]]:
                async for raw in ws:
                    msg = json.loads(raw)
                    kind = msg.get("type")
                    if kind == "ping":
                        await ws.send(json.dumps({"type": "pong"}))
                    elif kind == "next" and msg.get("id") == sub_id:
                        payload = msg["payload"]
                        if payload.get("errors"):
                            raise GraphQLRequestError(list(payload["errors"]))
                        yield dict(payload["data"])
                    elif kind == "error" and msg.get("id") == sub_id:
                        raise GraphQLRequestError(list(msg.get("payload") or []))
                    elif kind == "complete" and msg.get("id") == sub_id:
                        return

            yield results()
