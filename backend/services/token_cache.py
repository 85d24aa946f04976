"""Verified tokens, kept so a request needs no database read to know who calls.

Bounded: at most `MAX_TOKENS` identities, least recently used out first, each trusted for at most
`MAX_AGE_SECONDS`. Keyed by the token's hash, never the token. Every revocation and grant change
clears the cache of every process through the bus (`ACCESS_CHANNEL`); the age bound covers a process
that missed the message (a lost bus connection also clears it on resubscribe). Unknown tokens are not
kept: each one is looked up again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from backend.lru import LRU
from backend.repository.access import Identity

ACCESS_CHANNEL = "turnwise.access"
MAX_TOKENS = 10_000
MAX_AGE_SECONDS = 60.0


class TokenCache:
    def __init__(
        self,
        *,
        max_tokens: int = MAX_TOKENS,
        max_age: float = MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_tokens = max_tokens
        self.max_age = max_age
        self._clock = clock
        self._entries: LRU[str, tuple[float, Identity]] = LRU(max_tokens)
        # Advanced by every clear: a lookup that began before a clear must not store what it read.
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Identity | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        stored_at, identity = entry
        if self._clock() - stored_at > self.max_age:
            self._entries.pop(key)
            return None
        return identity

    def put(self, key: str, identity: Identity, generation: int) -> None:
        """Store what a lookup read, unless the cache was cleared since the lookup began."""
        if generation != self.generation:
            return
        self._entries.put(key, (self._clock(), identity))

    def clear(self) -> None:
        self._entries.clear()
        self.generation += 1
