"""The benches' own minimal GraphQL client: keep-alive HTTP and one graphql-transport-ws socket.

Deliberately small and isolated so a shared agent client can replace it without touching the benches.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import websockets
from websockets.asyncio.client import ClientConnection


class WireError(RuntimeError):
    """A GraphQL error, a protocol message we did not expect, or a closed socket."""


class Http:
    """One keep-alive HTTP client (a pool of up to `connections` reused connections)."""

    def __init__(self, base_url: str, token: str | None, *, connections: int = 64) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=30,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    async def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.client.post("/graphql", json={"query": query, "variables": variables or {}})
        body = response.json()
        if body.get("errors") or response.status_code != 200:
            raise WireError(json.dumps(body.get("errors") or body)[:500])
        return dict(body["data"])

    async def aclose(self) -> None:
        await self.client.aclose()


class Socket:
    """One graphql-transport-ws connection running one subscription at a time."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.current: str | None = None

    @classmethod
    async def open(cls, base_url: str, token: str | None) -> Socket:
        url = base_url.replace("http", "ws", 1) + "/graphql"
        ws = await websockets.connect(url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")])
        await ws.send(json.dumps({"type": "connection_init", "payload": {"token": token} if token else {}}))
        ack = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if ack.get("type") != "connection_ack":
            await ws.close()
            raise WireError(f"connection refused: {ack}")
        return cls(ws)

    async def subscribe(self, query: str, variables: dict[str, Any]) -> None:
        self.current = uuid.uuid4().hex
        message = {
            "id": self.current,
            "type": "subscribe",
            "payload": {"query": query, "variables": variables},
        }
        await self.ws.send(json.dumps(message))

    async def next(self, timeout: float = 30.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The data of the current subscription's next result."""
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            kind = message.get("type")
            if kind == "ping":
                await self.ws.send(json.dumps({"type": "pong"}))
                continue
            if message.get("id") != self.current:
                continue  # the `complete` of an earlier subscription
            if kind == "next":
                payload = message["payload"]
                if payload.get("errors"):
                    raise WireError(json.dumps(payload["errors"])[:500])
                return dict(payload["data"])
            raise WireError(f"subscription ended: {message}")

    async def close(self) -> None:
        await self.ws.close()
