"""A small GraphQL client for black-box tests: HTTP queries and graphql-transport-ws subscriptions."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import websockets


class GraphQLError(AssertionError):
    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(json.dumps(errors))
        self.errors = errors

    @property
    def codes(self) -> list[str | None]:
        return [(e.get("extensions") or {}).get("code") for e in self.errors]


class Client:
    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url = base_url
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def raw(self, query: str, variables: dict[str, Any] | None = None) -> httpx.Response:
        return await self.http.post("/graphql", json={"query": query, "variables": variables or {}})

    async def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.raw(query, variables)
        body = response.json()
        if body.get("errors"):
            raise GraphQLError(body["errors"])
        assert response.status_code == 200, response.text
        return dict(body["data"])

    @asynccontextmanager
    async def subscribe(
        self, query: str, variables: dict[str, Any] | None = None, *, params: dict[str, Any] | None = None
    ) -> AsyncIterator[Subscription]:
        url = self.base_url.replace("http", "ws", 1) + "/graphql"
        async with websockets.connect(
            url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")]
        ) as ws:
            payload = params if params is not None else ({"token": self.token} if self.token else {})
            await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
            ack = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert ack["type"] == "connection_ack", ack
            sub = Subscription(ws)
            await ws.send(
                json.dumps(
                    {
                        "id": sub.id,
                        "type": "subscribe",
                        "payload": {"query": query, "variables": variables or {}},
                    }
                )
            )
            yield sub


class Subscription:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.id = uuid.uuid4().hex

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The next `next` payload's data; raises on errors or completion."""
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            if msg["type"] == "ping":
                await self.ws.send(json.dumps({"type": "pong"}))
                continue
            if msg["type"] == "next":
                payload = msg["payload"]
                if payload.get("errors"):
                    raise GraphQLError(payload["errors"])
                return dict(payload["data"])
            if msg["type"] == "error":
                raise GraphQLError(msg["payload"])
            if msg["type"] == "complete":
                raise StopAsyncIteration
