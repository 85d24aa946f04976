"""The one bounded cache: never more than its limit, the least recently used out first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.lru import LRU


def test_a_hit_keeps_a_key_and_the_least_recently_used_goes_first() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.put("c", 3)
    assert "b" not in cache
    assert cache.get("a") == 1
    assert cache.get("c") == 3


def test_membership_does_not_refresh_a_key() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert "a" in cache
    cache.put("c", 3)
    assert "a" not in cache


def test_a_missing_key_gives_the_default_and_pop_forgets() -> None:
    cache: LRU[str, int] = LRU(1)
    assert cache.get("x") is None
    assert cache.get("x", 7) == 7
    cache.put("x", 1)
    assert cache.pop("x") == 1
    assert cache.pop("x") is None
    assert len(cache) == 0


def test_a_cache_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        LRU(0)


@given(st.integers(1, 8), st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=60))
def test_it_behaves_as_a_list_ordered_by_last_use(limit: int, ops: list[tuple[bool, int]]) -> None:
    cache: LRU[int, int] = LRU(limit)
    order: list[int] = []  # least recently used first
    for is_put, key in ops:
        if is_put:
            cache.put(key, key)
            order = [k for k in order if k != key] + [key]
            order = order[-limit:]
        else:
            assert cache.get(key) == (key if key in order else None)
            if key in order:
                order = [k for k in order if k != key] + [key]
        assert len(cache) == len(order) <= limit
        assert all(k in cache for k in order)
