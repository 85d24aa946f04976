"""GraphQL over one WebSocket (graphql-transport-ws), on the standard library alone.

The hook is a process per event, so what it imports is most of what it costs: `websockets` alone
takes longer to import than the whole hook may take. This is the part of RFC 6455 a client of one
short-lived connection needs: the upgrade (with its accept key checked), masked text frames out,
text, ping and close frames in (fragments joined), and graphql-transport-ws's init, subscribe, next,
error, complete and ping/pong. TLS (wss) when the URL is https.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import time
from urllib.parse import urlsplit

try:  # CPython's own SHA-1: loading OpenSSL for hashlib's costs more than the handshake
    from _sha1 import sha1  # type: ignore[import-not-found]  # no stubs: a CPython module
except ImportError:  # pragma: no cover - an interpreter without it
    from hashlib import sha1

# `typing` costs an import too: names for the type checker only (it takes this for typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's accept-key suffix
PROTOCOL = "graphql-transport-ws"
TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA
MAX_HEADER = 16_384


class HookError(Exception):
    """What the hook says on standard error before it steps aside (no decision, exit 0)."""


def _mask(data: bytes, key: bytes) -> bytes:
    if not data:
        return data
    n = len(data)
    pad = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(pad, "big")).to_bytes(n, "big")


class Wire:
    """One graphql-transport-ws connection, acknowledged. Every read has a deadline (monotonic)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.ids = 0

    @classmethod
    def open(cls, base_url: str, token: str, connect_seconds: float) -> Wire:
        """Connected and acknowledged within `connect_seconds`, or HookError saying why not."""
        deadline = time.monotonic() + connect_seconds
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HookError(f"TURNWISE_URL must be an http:// or https:// URL, not {base_url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        try:
            sock = socket.create_connection((parts.hostname, port), timeout=connect_seconds)
        except OSError as exc:
            raise HookError(f"Turnwise at {base_url} is unreachable: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        wire = cls(sock)
        try:
            if tls:
                import ssl  # only for https: it costs an import otherwise

                wire.sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
            wire._upgrade(parts.netloc, parts.path.rstrip("/") + "/graphql", deadline)
            wire.send({"type": "connection_init", "payload": {"token": token}})
            while True:
                message = wire.receive(deadline)
                if message.get("type") == "connection_ack":
                    return wire
                if message.get("type") != "ping":
                    raise HookError(f"Turnwise did not accept the connection: {message}")
        except (OSError, ValueError) as exc:
            wire.close()
            raise HookError(f"Turnwise at {base_url} did not answer: {exc}") from None
        except HookError:
            wire.close()
            raise

    def _upgrade(self, netloc: str, path: str, deadline: float) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n"
            ).encode()
        )
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > MAX_HEADER:
                raise HookError("Turnwise sent an oversized upgrade response")
            self._fill(deadline)
        head, _, rest = bytes(self.buf).partition(b"\r\n\r\n")
        self.buf = bytearray(rest)
        status, *lines = head.decode("latin-1").split("\r\n")
        if status.split(" ")[1:2] != ["101"]:
            raise HookError(f"Turnwise refused the WebSocket: {status}")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        # SHA-1 because RFC 6455 says so: a handshake check, not a secret.
        accept = base64.b64encode(sha1(key.encode() + GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            raise HookError("Turnwise's WebSocket upgrade did not answer our key")

    # --- frames -------------------------------------------------------------------------------------

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no answer in time")
        self.sock.settimeout(remaining)
        chunk = self.sock.recv(65536)
        if not chunk:
            raise HookError("Turnwise closed the connection")
        self.buf += chunk

    def _take(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            self._fill(deadline)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        key = os.urandom(4)
        self.sock.sendall(header + key + _mask(payload, key))

    def send(self, message: dict[str, Any]) -> None:
        self._frame(TEXT, json.dumps(message, separators=(",", ":")).encode())

    def receive(self, deadline: float) -> dict[str, Any]:
        """The next graphql-transport-ws message (pings answered on the way)."""
        while True:
            text = self._message(deadline)
            message = json.loads(text)
            if not isinstance(message, dict):
                raise HookError("Turnwise sent a message that is not a JSON object")
            if message.get("type") == "ping":
                self.send({"type": "pong"})
                continue
            return message

    def _message(self, deadline: float) -> bytes:
        parts: list[bytes] = []
        while True:
            first, second = self._take(2, deadline)
            opcode, n = first & 0x0F, second & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._take(2, deadline))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._take(8, deadline))
            key = self._take(4, deadline) if second & 0x80 else b""
            payload = self._take(n, deadline)
            if key:
                payload = _mask(payload, key)
            if opcode == PING:
                self._frame(PONG, payload)
                continue
            if opcode == PONG:
                continue
            if opcode == CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                reason = payload[2:].decode("utf-8", "replace")
                raise HookError(f"Turnwise closed the connection ({code} {reason})".rstrip())
            parts.append(payload)
            if first & 0x80:
                return b"".join(parts)

    # --- operations ---------------------------------------------------------------------------------

    def operation(self, query: str, variables: dict[str, Any], deadline: float) -> Iterator[dict[str, Any]]:
        """Each result's data until the server completes the operation; HookError on GraphQL errors."""
        self.ids += 1
        op_id = str(self.ids)
        self.send({"id": op_id, "type": "subscribe", "payload": {"query": query, "variables": variables}})
        while True:
            message = self.receive(deadline)
            if message.get("id") != op_id:
                continue
            kind = message.get("type")
            payload = message.get("payload")
            if kind == "complete":
                return
            if kind == "error" or (kind == "next" and isinstance(payload, dict) and payload.get("errors")):
                errors = payload if kind == "error" else payload["errors"]  # type: ignore[index]
                raise HookError(f"Turnwise refused it: {_errors(errors)}")
            if kind == "next" and isinstance(payload, dict):
                yield dict(payload.get("data") or {})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._frame(CLOSE, struct.pack("!H", 1000))
        with contextlib.suppress(OSError):
            self.sock.close()


def _errors(errors: Any) -> str:
    if isinstance(errors, list):
        return "; ".join(
            f"{(e.get('extensions') or {}).get('code', 'ERROR')}: {e.get('message')}"
            if isinstance(e, dict)
            else str(e)
            for e in errors
        )
    return str(errors)
