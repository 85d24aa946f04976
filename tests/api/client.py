"""The black-box tests' GraphQL client: the package's agent-client transport with test-friendly errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from backend.client.transport import GraphQLRequestError, GraphQLTransport
from backend.client.transport import Subscription as _Subscription


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
        self.transport = GraphQLTransport(base_url, token, timeout=30)

    @property
    def http(self) -> httpx.AsyncClient:
        return self.transport.http

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def raw(self, query: str, variables: dict[str, Any] | None = None) -> httpx.Response:
        return await self.transport.raw(query, variables)

    async def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return await self.transport.execute(query, variables)
        except GraphQLRequestError as error:
            raise GraphQLError(error.errors) from None

    @asynccontextmanager
    async def subscribe(
        self, query: str, variables: dict[str, Any] | None = None, *, params: dict[str, Any] | None = None
    ) -> AsyncIterator[Subscription]:
        async with self.transport.subscription(query, variables, params=params) as sub:
            yield Subscription(sub)


class Subscription:
    def __init__(self, sub: _Subscription) -> None:
        self.sub = sub
        self.id = sub.id

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The next `next` payload's data; raises on errors or completion."""
        try:
            return await self.sub.next(timeout)
        except GraphQLRequestError as error:
            raise GraphQLError(error.errors) from None
