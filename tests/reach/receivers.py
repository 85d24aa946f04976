"""Real receivers for outbound messages, on this machine: an HTTP endpoint for `json://` channels,
a Web Push endpoint that checks VAPID and decrypts the payload like a browser's push service and
the browser together, and an SMTP server (aiosmtpd) for `mailto://`."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece  # type: ignore[import-untyped]
from aiosmtpd.controller import Controller
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from tests.servers import free_port


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Received:
    items: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    times: list[float] = field(default_factory=list)  # time.monotonic() of each item's arrival

    def add(self, item: Any) -> None:
        with self.lock:
            self.items.append(item)
            self.times.append(time.monotonic())

    def wait(self, count: int, seconds: float = 15.0) -> list[Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.items) >= count:
                    return list(self.items)
            time.sleep(0.02)
        with self.lock:
            raise AssertionError(f"received {len(self.items)} of {count}: {str(self.items[:3])[:600]} ...")

    def now(self) -> list[Any]:
        with self.lock:
            return list(self.items)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the worker sends a batch side by side

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a held request whose client gave up: nothing to say


@dataclass
class Script:
    """How a receiver answers: the statuses in `first`, one per request, then `status`; a 3xx
    names `location`. While `hold` is clear, a request waits (up to 30 s) before it is answered."""

    status: int = 200
    first: list[int] = field(default_factory=list)
    location: str | None = None
    hold: threading.Event = field(default_factory=lambda: _set(threading.Event()))

    def answer(self) -> tuple[int, dict[str, str]]:
        self.hold.wait(30)
        status = self.first.pop(0) if self.first else self.status
        headers = {"Location": self.location} if self.location and 300 <= status < 400 else {}
        return status, headers


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


@contextmanager
def http_receiver(handle: Any) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 calling `handle(path, headers, body)` per POST: a status, or
    (status, headers)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as push services and webhooks speak it

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = handle(self.path, dict(self.headers.items()), body)
            status, headers = answer if isinstance(answer, tuple) else (answer, {})
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = _Server(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def json_channel() -> Iterator[tuple[str, Received]]:
    """A webhook for Apprise's json:// (it POSTs {"title", "message", "type", ...})."""
    received = Received()

    def handle(_path: str, _headers: dict[str, str], body: bytes) -> int:
        received.add(json.loads(body))
        return 200

    with http_receiver(handle) as address:
        yield address, received


@dataclass
class Webhook:
    """A webhook for Apprise's json:// that answers as its `script` says; `asked` keeps every request
    (whatever it was answered), `received` those answered 2xx."""

    address: str
    received: Received = field(default_factory=Received)
    asked: Received = field(default_factory=Received)
    script: Script = field(default_factory=Script)


@contextmanager
def webhook() -> Iterator[Webhook]:
    holder: list[Webhook] = []

    def handle(_path: str, _headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str]]:
        hook = holder[0]
        message = json.loads(body)
        hook.asked.add(message)
        status, headers = hook.script.answer()
        if 200 <= status < 300:
            hook.received.add(message)
        return status, headers

    with http_receiver(handle) as address:
        holder.append(Webhook(address))
        yield holder[0]


@dataclass
class Browser:
    """A browser's push subscription: its own key pair and auth secret, as PushManager makes them."""

    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    auth: bytes = field(default_factory=lambda: __import__("os").urandom(16))

    @property
    def p256dh(self) -> str:
        point = self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(point)

    @property
    def auth_secret(self) -> str:
        return b64url(self.auth)


def verify_vapid(authorization: str, audience: str) -> dict[str, Any]:
    """RFC 8292: `vapid t=<ES256 JWT>, k=<the server's public key>`; the claims, once checked."""
    assert authorization.startswith("vapid "), authorization
    parts = dict(p.strip().split("=", 1) for p in authorization[len("vapid ") :].split(","))
    token, key = parts["t"], parts["k"]
    header_b64, claims_b64, signature_b64 = token.split(".")
    header = json.loads(unb64url(header_b64))
    assert header["alg"] == "ES256"
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
    raw = unb64url(signature_b64)
    signature = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        public.verify(signature, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise AssertionError("the VAPID signature does not verify") from None
    claims = json.loads(unb64url(claims_b64))
    assert claims["aud"] == audience, claims
    assert claims["exp"] > time.time(), claims
    assert str(claims["sub"]).startswith(("mailto:", "https:")), claims
    claims["k"] = key
    return dict(claims)


@dataclass
class PushService:
    """A push service endpoint: checks each request's VAPID JWT, decrypts its aes128gcm body with the
    subscribing browser's private key, and keeps the JSON payloads. `status` answers every request
    (201, or 410 for a subscription that is gone); `script.first` the first ones, `script.hold`
    holds them."""

    address: str
    browser: Browser
    received: Received
    status: int = 201
    vapid_keys: set[str] = field(default_factory=set)
    asked: Received = field(default_factory=Received)  # every request, whatever it was answered
    script: Script = field(default_factory=lambda: Script(status=201))

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}/push/{id(self)}"


@contextmanager
def push_service() -> Iterator[PushService]:
    holder: list[PushService] = []

    def handle(_path: str, headers: dict[str, str], body: bytes) -> int | tuple[int, dict[str, str]]:
        service = holder[0]
        claims = verify_vapid(headers["Authorization"], f"http://{service.address}")
        service.vapid_keys.add(claims["k"])
        service.asked.add(claims)
        assert headers["Content-Encoding"] == "aes128gcm"
        assert int(headers["TTL"]) > 0
        service.script.status = service.status
        status, extra = service.script.answer()
        if status != 201:
            return status, extra
        plain = http_ece.decrypt(
            body, private_key=service.browser.key, auth_secret=service.browser.auth, version="aes128gcm"
        )
        service.received.add(json.loads(plain))
        return 201

    with http_receiver(handle) as address:
        service = PushService(address, Browser(), Received())
        holder.append(service)
        yield service


class _Mailbox:
    def __init__(self, received: Received) -> None:
        self.received = received

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content, policy=default_policy)
        body = message.get_body(preferencelist=("plain", "html"))
        self.received.add(
            {
                "to": list(envelope.rcpt_tos),
                "subject": str(message["subject"]),
                "body": body.get_content() if body is not None else "",
            }
        )
        return "250 OK"


@contextmanager
def smtp_server() -> Iterator[tuple[int, Received]]:
    received = Received()
    port = free_port()
    controller = Controller(_Mailbox(received), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, received
    finally:
        controller.stop()


async def eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Until `check()` holds (a worker records what a receiver already has a moment later)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.02)
