"""What the page must keep alive: listener proxies for as long as the page lives, tasks until done.

A JavaScript listener proxy, or an asyncio task referenced from nowhere else, can be collected while
it is still needed, so the page holds them here. The two are held apart: proxies are never dropped,
and a task is dropped exactly when it finishes, so neither list grows with the page's age.
"""

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

import asyncio


class Lifetimes:
    def __init__(self) -> None:
        self._proxies: list[Any] = []
        self._running: dict[int, Any] = {}
        self._next = 0

    def keep(self, proxy: Any) -> Any:
        """Hold a listener proxy for as long as the page lives; returns it."""
        self._proxies.append(proxy)
        return proxy

    def spawn(self, coroutine: Any) -> Any:
        """Run a coroutine as a task held until it ends (however it ends); returns the task."""
        key = self._next
        self._next += 1

        async def run() -> None:
            try:
                await coroutine
            finally:
                self._running.pop(key, None)

        task = asyncio.create_task(run())
        self._running[key] = task
        return task

    @property
    def proxies(self) -> list[Any]:
        return list(self._proxies)

    @property
    def running(self) -> int:
        return len(self._running)
