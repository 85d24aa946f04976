"""The Strawberry ASGI view: authentication for HTTP and WebSocket, context construction, and the
media types and status codes of GraphQL over HTTP."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from cross_web import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from backend import jsoncodec
from backend.api import fanout, graphiql
from backend.api.auth import Authenticator, bearer_from_header, bearer_from_params
from backend.api.context import Context
from backend.db.health import is_outage
from backend.domain.errors import TurnwiseError, Unavailable
from backend.lru import LRU
from backend.services.container import Services

GRAPHQL_RESPONSE_JSON = "application/graphql-response+json"
JSON = "application/json"
# What a request error (no `data` entry) gets under graphql-response+json: 400 unless the server
# failed, so a client can tell its own mistakes from what is worth retrying.
_SERVER_ERROR_STATUS = {"UNAVAILABLE": 503, "INTERNAL": 500}


_DOCUMENT_TEXT_BOUND = 16_000
# Document texts by themselves, so equal texts are one string (a cache keyed by text then compares
# them by identity first).
_DOCUMENTS: LRU[str, str] = LRU(256)


def _interned(text: str) -> str:
    known = _DOCUMENTS.get(text)
    if known is None:
        if len(text) > _DOCUMENT_TEXT_BOUND:
            return text
        _DOCUMENTS.put(text, text)
        known = text
    return known


def response_media_type(accept: str | None) -> str | None:
    """The media type to answer a request with this Accept header, or None when it accepts neither
    of ours. By the GraphQL-over-HTTP spec and RFC 9110: each type takes the quality of the most
    specific range naming it; the client's preferred one wins (quality, then the more specific
    range, then the order listed). No header and wildcards alone get application/json, as the
    spec's audit (graphql-http) expects and as every client that predates graphql-response+json
    reads."""
    if not accept or accept == "*/*" or not accept.strip():  # `*/*`: httpx, fetch, so our clients
        return JSON
    ranges = [_media_range(item) for item in accept.split(",")]
    best: tuple[float, int, int] | None = None
    chosen: str | None = None
    for offered in (JSON, GRAPHQL_RESPONSE_JSON):  # JSON first: on a full tie (`*/*`) it stays
        matches = [
            (specificity, -position, quality)
            for position, (media, quality) in enumerate(ranges)
            if (specificity := _matches(media, offered)) is not None
        ]
        if not matches:
            continue
        specificity, position, quality = max(matches)
        rank = (quality, specificity, position)
        if quality > 0 and (best is None or rank > best):
            best, chosen = rank, offered
    return chosen


def _media_range(item: str) -> tuple[str, float]:
    media, *params = (part.strip().lower() for part in item.split(";"))
    for param in params:
        name, _, value = param.partition("=")
        if name.strip() == "q":
            try:
                return media, float(value)
            except ValueError:
                return media, 0.0
    return media, 1.0


def _matches(media_range: str, media_type: str) -> int | None:
    """How specifically a range of an Accept header names the type: 2 exactly, 1 by `type/*`, 0 by
    `*/*`; None when it does not."""
    if media_range == media_type:
        return 2
    if media_range == media_type.split("/")[0] + "/*":
        return 1
    return 0 if media_range == "*/*" else None


def _content_type(media_type: str) -> str:
    # application/json keeps the exact header every existing client has seen; the newer type names
    # its encoding, as the spec asks.
    return media_type if media_type == JSON else f"{media_type}; charset=utf-8"


def _is_request_error(result: ExecutionResult) -> bool:
    """The request failed before execution (parse, validation, variable coercion): no data and only
    errors without a path. A field error always has a path, also one that nulled the whole result."""
    return result.data is None and bool(result.errors) and all(e.path is None for e in result.errors or ())


def _request_error_status(errors: list[Any]) -> int:
    for error in errors:
        code = (error.get("extensions") or {}).get("code") if isinstance(error, dict) else None
        if code in _SERVER_ERROR_STATUS:
            return _SERVER_ERROR_STATUS[code]
    return 400


def _error_response(
    message: str,
    code: str,
    status_code: int,
    media_type: str = JSON,
    *,
    headers: dict[str, str] | None = None,
    **extensions: object,
) -> Response:
    """An answer the view gives itself (no operation ran), in GraphQL's shape: no `data` entry."""
    body = {"errors": [{"message": message, "extensions": {"code": code, **extensions}}]}
    response = Response(json.dumps(body), status_code=status_code, headers=headers)
    response.headers["content-type"] = _content_type(media_type)
    return response


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

    def websocket(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The endpoint of a WebSocket handshake: Strawberry's own, returned to be awaited by the
        caller, so a connection that lasts hours holds no frame of this view's `__call__`."""
        return super().__call__(scope, receive, send)

    @property
    def graphql_ide_html(self) -> str:
        # Local assets only: the default page would load React and GraphiQL from a CDN.
        return self._ide_html

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _wants_ide(scope):
            request = Request(scope, receive)
            media_type = response_media_type(request.headers.get("accept"))
            if media_type is None:
                # The spec's recommended answer to an Accept we cannot meet, before any work.
                message = f"Accept {GRAPHQL_RESPONSE_JSON} or {JSON}"
                await _error_response(message, "NOT_ACCEPTABLE", 406)(scope, receive, send)
                return
            try:
                principal = await self.authenticator.authenticate(
                    bearer_from_header(request.headers.get("authorization"))
                )
            except TurnwiseError as exc:
                headers = {"WWW-Authenticate": "Bearer"}
                response = _error_response(str(exc), exc.code, 401, media_type, headers=headers)
                await response(scope, receive, send)
                return
            except Exception as exc:
                if not is_outage(exc):
                    raise
                # A token not yet cached could not be looked up: the database is gone for now.
                await unavailable_response(media_type)(scope, receive, send)
                return
            state = scope.setdefault("state", {})
            state["principal"] = principal
            state["media_type"] = media_type
            try:
                response = await self.run(request)
            except HTTPException as exc:
                # Not a GraphQL request at all (bad JSON, a batch, a wrong method): still answer in
                # GraphQL's shape, so every client reads errors one way.
                response = _error_response(exc.reason, "BAD_REQUEST", exc.status_code, media_type)
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def get_sub_response(self, request: Request | WebSocket) -> Response:
        sub_response = await super().get_sub_response(request)
        # Carried to `create_response`, which Strawberry calls without the request.
        sub_response.media_type = request.scope.get("state", {}).get("media_type", JSON)
        return sub_response

    async def process_result(self, request: Request, result: ExecutionResult) -> GraphQLHTTPResponse:
        response_data = await super().process_result(request, result)
        if _is_request_error(result):
            # The GraphQL spec: a request that failed before execution has no `data` entry (Strawberry
            # writes `"data": null`, which would claim that execution ran and failed).
            response_data.pop("data", None)
        return response_data

    def create_response(
        self,
        response_data: GraphQLHTTPResponse | list[GraphQLHTTPResponse],
        sub_response: Response,
    ) -> Response:
        # Strawberry's answer is application/json and 200, always; GraphQL over HTTP asks for the
        # negotiated type and, under graphql-response+json, a 4xx/5xx for a response without `data`.
        response = super().create_response(response_data, sub_response)
        media_type = sub_response.media_type or JSON
        response.headers["content-type"] = _content_type(media_type)
        if (
            media_type == GRAPHQL_RESPONSE_JSON
            and not isinstance(response_data, list)  # batches are refused before this
            and "data" not in response_data
            and not sub_response.status_code  # a resolver's own choice stands
        ):
            response.status_code = _request_error_status(response_data.get("errors") or [])
        return response

    def decode_json(self, data: str | bytes) -> object:
        message = jsoncodec.loads(data)
        if type(message) is dict and message.get("type") == "subscribe":
            # An operation holds its document's text for as long as it runs: ten thousand
            # subscriptions of one document hold one text.
            payload = message.get("payload")
            if type(payload) is dict and type(query := payload.get("query")) is str:
                payload["query"] = _interned(query)
        return message

    def encode_json(self, data: object) -> str:
        # Text, never bytes: Strawberry sends bytes as a binary WebSocket frame, which
        # graphql-transport-ws does not allow. A shared event's result (one change fanned out to many
        # subscriptions) has its data encoded once; each `next` message is framed around that text.
        return fanout.next_message(data) or jsoncodec.dumps(data)

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


def unavailable_response(media_type: str = JSON) -> Response:
    """What an HTTP request gets when the database is gone before its operation could start."""
    unavailable = Unavailable()
    return _error_response(
        str(unavailable),
        unavailable.code,
        503,
        media_type,
        headers={"Retry-After": "1"},
        retryable=True,
    )
