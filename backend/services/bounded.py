"""Work that must outlive a cancelled request but not a finite deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def bounded(background: set[asyncio.Task[Any]], work: Awaitable[T], seconds: float) -> T:
    """Run `work` in a task of its own: a cancelled caller does not cancel it, and at `seconds` it is
    cancelled and the caller gets TimeoutError at once. The caller does not wait for the cancelled
    work to unwind: a SQLite writer blocked on the database lock cannot be interrupted before its
    busy timeout, and the deadline must hold there too. `background` keeps the task referenced."""
    loop = asyncio.get_running_loop()
    task: asyncio.Task[T] = asyncio.ensure_future(work)
    background.add(task)
    # What the caller awaits: settled when the work ends or at the deadline, whichever comes first.
    # Cancelling the caller cancels only this, never the work (as `asyncio.shield` would).
    outcome: asyncio.Future[None] = loop.create_future()

    def expire() -> None:
        task.cancel()
        if not outcome.done():
            outcome.set_exception(TimeoutError(f"not done within {seconds} s"))

    deadline = loop.call_later(seconds, expire)

    def finished(done: asyncio.Task[T]) -> None:
        background.discard(done)
        deadline.cancel()
        if not outcome.done():
            outcome.set_result(None)
        elif not done.cancelled():
            done.exception()  # nobody waits for it any more: its failure is not left "never retrieved"

    task.add_done_callback(finished)
    current = asyncio.current_task()
    await outcome
    try:
        return task.result()
    except asyncio.CancelledError:
        if current is None or not current.cancelling():
            raise TimeoutError(f"not done within {seconds} s") from None
        raise
