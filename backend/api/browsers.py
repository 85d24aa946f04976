"""Browser requests that may act with a person's ambient credentials: the one rule for `/mcp` and
for GraphQL WebSocket handshakes (origin and host checks against DNS rebinding)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Mapping
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send
from strawberry.http.websocket_origin import is_same_origin, normalize_allowed_origins, normalize_origin

from backend.config import Settings

log = logging.getLogger("turnwise.api")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
# Bind addresses that name no host a browser could address.
ANY_ADDRESS = frozenset({"", "0.0.0.0", "::", "[::]"})


HOST_ENTRY = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")


def _host_and_port(value: str) -> tuple[str, int | None] | None:
    try:
        parts = urlsplit(f"//{value.strip()}")
        return (parts.hostname or "", parts.port)
    except ValueError:
        return None


class BrowserRule:
    """Which browser requests may reach `/mcp` and open a GraphQL WebSocket: no `Origin` (not a
    browser), the same origin, or an allowed one (`TURNWISE_ALLOWED_ORIGINS`); and besides, a browser
    request must address one of this server's host names (`TURNWISE_ALLOWED_HOSTS`), since a page
    whose name was rebound to this machine is its own origin."""

    def __init__(self, settings: Settings) -> None:
        names = [*LOOPBACK_HOSTS, *([] if settings.host in ANY_ADDRESS else [settings.host])]
        self.any_host = "*" in settings.allowed_hosts
        # host name -> the ports it may be addressed on; None: any port (an entry without one)
        self.hosts: dict[str, set[int] | None] = {}
        for entry in [*names, *(h for h in settings.allowed_hosts if h != "*")]:
            parsed = _host_and_port(entry) if HOST_ENTRY.fullmatch(entry) else None
            if parsed is None or not parsed[0]:
                raise ValueError(f"TURNWISE_ALLOWED_HOSTS: {entry!r} is no host name (host or host:port)")
            name, port = parsed
            if port is None:
                self.hosts[name] = None
            elif name not in self.hosts:
                self.hosts[name] = {port}
            elif (ports := self.hosts[name]) is not None:
                ports.add(port)
        self.origins = normalize_allowed_origins(settings.allowed_origins)

    def host_allowed(self, host: str | None) -> bool:
        if self.any_host:
            return True
        parsed = None if host is None else _host_and_port(host)
        if parsed is None or parsed[0] not in self.hosts:
            return False
        ports = self.hosts[parsed[0]]
        return ports is None or parsed[1] in ports

    def refusal(self, headers: Mapping[str, str]) -> str | None:
        """Why the request is refused (HTTP 403), or None to let it through."""
        origin = headers.get("origin")
        if origin is None:
            return None  # not a browser: it carries no ambient credentials and cannot be rebound
        host = headers.get("host")
        if not self.host_allowed(host):
            return f"host {host!r} is not a name of this server (TURNWISE_ALLOWED_HOSTS)"
        if headers.get("sec-fetch-site") == "same-origin" or is_same_origin(origin, host):
            return None
        if "*" in self.origins or normalize_origin(origin) in self.origins:
            return None
        return f"origin {origin!r} is not allowed (TURNWISE_ALLOWED_ORIGINS)"


def headers_of(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class GuardedWebSockets:
    """An ASGI app in front of a WebSocket endpoint: a browser handshake the rule refuses is closed
    before it is accepted, which the server answers with HTTP 403.

    Not a coroutine function itself: it returns the endpoint's own awaitable (or the refusal's), so a
    connection that lasts hours holds no frame of this layer."""

    def __init__(self, app: ASGIApp, rule: BrowserRule) -> None:
        self.app = app
        self.rule = rule

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "websocket":
            refused = self.rule.refusal(headers_of(scope))
            if refused is not None:
                return self._refuse(refused, receive, send)
        return self.app(scope, receive, send)

    @staticmethod
    async def _refuse(refused: str, receive: Receive, send: Send) -> None:
        log.warning("websocket handshake refused", extra={"event": "ws.refused", "reason": refused})
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008, "reason": refused[:120]})
