"""The one bounded cache: at most `limit` entries, the least recently used out first."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class LRU(Generic[K, V]):
    """A dict of at most `limit` entries. A `get` that finds its key, and every `put`, make the key
    the most recently used; `in` does not. Every cache in the server is one of these, so "how big can
    it grow, and what goes first" has one answer."""

    __slots__ = ("_entries", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an LRU holds at least one entry, not {limit}")
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        try:
            self._entries.move_to_end(key)
        except KeyError:
            return default
        return self._entries[key]

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
