"""Web Push to a browser's push service: VAPID (RFC 8292) and aes128gcm payloads (RFC 8291).

The server's VAPID key pair is made on first start and kept in the database (or given with
`TURNWISE_VAPID_PRIVATE_KEY`, a PEM or the raw private key in URL-safe base64). Sending is one HTTPS
POST per subscription; the endpoint's answer tells what happened: 201/202 delivered, 404/410 the
subscription is gone (remove it), 429/5xx or a connection failure retry later. A redirect is never
followed (the client is made with `follow_redirects=False`): a 3xx is a failed send, so a push
endpoint cannot send the request on to this machine.
"""

from __future__ import annotations

import base64
import os
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import http_ece  # type: ignore[import-untyped]
import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02  # type: ignore[import-untyped]

TTL_SECONDS = 24 * 3600
JWT_SECONDS = 12 * 3600


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class VapidKeys:
    vapid: Vapid02

    @classmethod
    def generate(cls) -> VapidKeys:
        vapid = Vapid02()
        vapid.generate_keys()
        return cls(vapid)

    @classmethod
    def load(cls, text: str) -> VapidKeys:
        """A PEM private key, or the raw 32-byte private value in URL-safe base64."""
        text = text.strip()
        if text.startswith("-----BEGIN"):
            return cls(Vapid02.from_pem(text.encode()))
        return cls(Vapid02.from_raw(text.encode()))

    def private_text(self) -> str:
        return str(self.vapid.private_pem().decode())

    @property
    def public_key(self) -> str:
        """The application server key a browser subscribes with: the uncompressed P-256 point."""
        point = self.vapid.public_key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(point)

    def authorization(self, endpoint: str, subject: str) -> str:
        parts = urlsplit(endpoint)
        claims = {
            "aud": f"{parts.scheme}://{parts.netloc}",
            "exp": int(time.time()) + JWT_SECONDS,
            "sub": subject,
        }
        return str(self.vapid.sign(claims)["Authorization"])


def encrypt(payload: bytes, p256dh: str, auth: str) -> bytes:
    """The aes128gcm body for a subscription's keys, with a fresh ephemeral key and salt."""
    return bytes(
        http_ece.encrypt(
            payload,
            salt=os.urandom(16),
            private_key=ec.generate_private_key(ec.SECP256R1()),
            dh=b64url_decode(p256dh),
            auth_secret=b64url_decode(auth),
            version="aes128gcm",
        )
    )


@dataclass(frozen=True)
class PushResult:
    delivered: bool
    gone: bool  # 404 / 410: the subscription no longer exists
    retryable: bool
    detail: str


async def send(
    client: httpx.AsyncClient,
    keys: VapidKeys,
    subject: str,
    endpoint: str,
    p256dh: str,
    auth: str,
    payload: bytes,
    *,
    urgency: str = "high",
) -> PushResult:
    body = encrypt(payload, p256dh, auth)
    headers = {
        "Authorization": keys.authorization(endpoint, subject),
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        "TTL": str(TTL_SECONDS),
        "Urgency": urgency,
    }
    response = await client.post(endpoint, content=body, headers=headers)
    status = response.status_code
    if status in (200, 201, 202):
        return PushResult(True, False, False, str(status))
    if status in (404, 410):
        return PushResult(False, True, False, str(status))
    return PushResult(False, False, status == 429 or status >= 500, f"{status} {response.text[:200]}")
