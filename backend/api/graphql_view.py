"""The Strawberry ASGI view: authentication for HTTP and WebSocket, context construction."""

from __future__ import annotations

import json
from typing import Any

from cross_web import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError

from backend import jsoncodec
from backend.api import graphiql
from backend.api.auth import Authenticator, bearer_from_header, bearer_from_params
from backend.api.context import Context
from backend.db.health import is_outage
from backend.domain.errors import TurnwiseError, Unavailable
from backend.services.container import Services


def _wants_ide(scope: Scope) -> bool:
    if scope.get("method") != "GET":
        return False
    headers = dict(scope.get("headers") or [])
    accept = headers.get(b"accept", b"").decode("latin-1")
    query = scope.get("query_string", b"")
    return "text/html" in accept and b"query=" not in query


class GraphQLView(GraphQL[Context, None]):
    def __init__(self, services: Services, authenticator: Authenticator, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.services = services
        self.authenticator = authenticator
        self._ide_html = graphiql.page()

    @property
    def graphql_ide_html(self) -> str:
        # Local assets only: the default page would load React and GraphiQL from a CDN.
        return self._ide_html

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _wants_ide(scope):
            request = Request(scope, receive)
            try:
                principal = await self.authenticator.authenticate(
                    bearer_from_header(request.headers.get("authorization"))
                )
            except TurnwiseError as exc:
                body = {"errors": [{"message": str(exc), "extensions": {"code": exc.code}}]}
                response = Response(
                    json.dumps(body),
                    status_code=401,
                    media_type="application/json",
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
            except Exception as exc:
                if not is_outage(exc):
                    raise
                # A token not yet cached could not be looked up: the database is gone for now.
                await unavailable_response()(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
            try:
                response = await self.run(request)
            except HTTPException as exc:
                # Not a GraphQL request at all (bad JSON, a batch, a wrong method): still answer in
                # GraphQL's shape, so every client reads errors one way.
                body = {"errors": [{"message": exc.reason, "extensions": {"code": "BAD_REQUEST"}}]}
                response = Response(
                    json.dumps(body), status_code=exc.status_code, media_type="application/json"
                )
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def decode_json(self, data: str | bytes) -> object:
        return jsoncodec.loads(data)

    def encode_json(self, data: object) -> str:
        # Text, never bytes: Strawberry sends bytes as a binary WebSocket frame, which
        # graphql-transport-ws does not allow.
        return jsoncodec.dumps(data)

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        principal = request.scope.get("state", {}).get("principal")
        return Context(
            services=self.services, principal_or_none=principal, request=request, response=response
        )

    async def on_ws_connect(self, context: Context) -> dict[str, object] | None:
        try:
            context.principal_or_none = await self.authenticator.authenticate(
                bearer_from_params(context.connection_params)
            )
        except TurnwiseError as exc:
            raise ConnectionRejectionError({"message": str(exc)}) from exc
        except Exception as exc:
            if not is_outage(exc):
                raise
            unavailable = Unavailable()
            raise ConnectionRejectionError(
                {"message": str(unavailable), "code": unavailable.code, "retryable": True}
            ) from exc
        return None


def unavailable_response() -> Response:
    """What an HTTP request gets when the database is gone before its operation could start."""
    unavailable = Unavailable()
    body = {
        "errors": [{"message": str(unavailable), "extensions": {"code": unavailable.code, "retryable": True}}]
    }
    return Response(
        json.dumps(body), status_code=503, media_type="application/json", headers={"Retry-After": "1"}
    )
