"""Channel names as the brokers accept them (shared by the bus and its backends)."""

from __future__ import annotations

import hashlib


def bus_channel_name(channel: str, limit: int = 63) -> str:
    """A channel name the broker accepts: PostgreSQL identifiers hold at most 63 bytes."""
    if len(channel.encode()) <= limit:
        return channel
    return "turnwise.h." + hashlib.sha256(channel.encode()).hexdigest()[:40]
