"""Reads of many callers coalesced into few statements, each as new as its caller's request.

When thousands of phones and tabs reconnect at once (a deploy, a network blip), each subscription
reads its snapshot: one statement per subscriber, all asking about the same task. `Coalesced` turns
the reads that pile up into one read per batch of callers: a caller joins the batch that has not
started yet (or starts one), and that batch's read starts only after every one of its callers asked.
So each caller gets a result at least as new as its own request, exactly as a read of its own would
give (a subscription registers its watcher first, then reads: no change between the two is lost, and
none is older than the read). Batches run one after another; while one runs, the next fills up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class _Batch(Generic[K, R]):
    __slots__ = ("done", "keys")

    def __init__(self, done: asyncio.Future[R]) -> None:
        self.keys: dict[K, None] = {}
        self.done = done


def _retrieve(future: asyncio.Future[Any]) -> None:
    # Every caller of a failed batch may have gone (cancelled): its error is not left unretrieved.
    if not future.cancelled():
        future.exception()


class Coalesced(Generic[K, R]):
    """`await read(keys)`: `read_many(union of the keys of its batch)` (at most `max_keys` keys a
    batch); the caller picks its own keys out of the result."""

    def __init__(self, read_many: Callable[[list[K]], Awaitable[R]], *, max_keys: int = 1000) -> None:
        self._read_many = read_many
        self.max_keys = max_keys
        self._queued: deque[_Batch[K, R]] = deque()  # not started yet, oldest first
        self._runner: asyncio.Task[None] | None = None
        self.reads = 0  # statements' worth of reads run (tests and benches read it)

    async def read(self, keys: Sequence[K]) -> R:
        batch = self._queued[-1] if self._queued else None
        if batch is None or len(batch.keys) + len(keys) > self.max_keys:
            batch = _Batch(asyncio.get_running_loop().create_future())
            batch.done.add_done_callback(_retrieve)
            self._queued.append(batch)
        batch.keys.update(dict.fromkeys(keys))
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run())
        # Shielded: a caller that goes away leaves the read to the batch's other callers.
        return await asyncio.shield(batch.done)

    async def _run(self) -> None:
        try:
            while self._queued:
                batch = self._queued.popleft()
                self.reads += 1
                try:
                    result = await self._read_many(list(batch.keys))
                except asyncio.CancelledError:
                    batch.done.cancel()
                    raise
                except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                    batch.done.set_exception(exc)
                else:
                    batch.done.set_result(result)
        finally:
            self._runner = None
            for batch in self._queued:  # only when cancelled (the process stops): nobody will read them
                batch.done.cancel()
            self._queued.clear()
