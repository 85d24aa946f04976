"""Channel names as the brokers accept them (shared by the bus and its backends)."""

from __future__ import annotations

import hashlib
import re


def bus_channel_name(channel: str, limit: int = 63) -> str:
    """A channel name the broker accepts: PostgreSQL identifiers hold at most 63 bytes."""
    if len(channel.encode()) <= limit:
        return channel
    return "turnwise.h." + hashlib.sha256(channel.encode()).hexdigest()[:40]


_NAMESPACE = re.compile(r"[A-Za-z0-9_.\-]{0,40}")


def namespace_prefix(namespace: str) -> str:
    """What a bus of this namespace puts before every channel's name at the broker (`<namespace>.`;
    empty for none), so deployments or test runs sharing one Redis or PostgreSQL never hear each other."""
    if not _NAMESPACE.fullmatch(namespace):
        raise ValueError(
            f"bus namespace {namespace!r}: at most 40 letters, digits, '_', '-' or '.' (or none)"
        )
    return f"{namespace}." if namespace else ""
