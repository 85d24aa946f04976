"""The token cache's bounds: entries, age, and lookups that raced a clear."""

from __future__ import annotations

from backend.repository.access import Identity
from backend.services.token_cache import TokenCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def identity(user: str) -> Identity:
    return Identity(user, "user", None, frozenset({"task-1"}))


def test_the_least_recently_used_token_goes_first_when_the_cache_is_full() -> None:
    cache = TokenCache(max_tokens=2)
    cache.put("a", identity("a"), cache.generation)
    cache.put("b", identity("b"), cache.generation)
    assert cache.get("a") == identity("a")  # a is now the most recently used
    cache.put("c", identity("c"), cache.generation)
    assert len(cache) == 2
    assert cache.get("b") is None
    assert cache.get("a") == identity("a")
    assert cache.get("c") == identity("c")


def test_an_identity_older_than_the_age_bound_is_read_again() -> None:
    clock = Clock()
    cache = TokenCache(max_age=60.0, clock=clock)
    cache.put("a", identity("a"), cache.generation)
    clock.now = 60.0
    assert cache.get("a") == identity("a")
    clock.now = 60.5
    assert cache.get("a") is None
    assert len(cache) == 0


def test_a_lookup_that_began_before_a_clear_stores_nothing() -> None:
    cache = TokenCache()
    began = cache.generation
    cache.clear()  # a revocation committed while the lookup read the database
    cache.put("a", identity("a"), began)
    assert cache.get("a") is None
    cache.put("a", identity("a"), cache.generation)
    assert cache.get("a") == identity("a")
    cache.clear()
    assert cache.get("a") is None
