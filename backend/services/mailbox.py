"""A subscriber's mailbox: the newest value per key, and, while its reader is idle, a direct send.

`Mailbox` keeps the newest value per key (session, message, task), so a slow subscriber receives the
latest state instead of an unbounded queue, and an idle mailbox costs two dicts and the future its
reader awaits. A value offered while the reader waits may be sent straight to its subscriber
(`Mailbox.direct`), run at once in the offering step (`eagerly`), instead of waking the reader. The
live hub (`backend/services/live.py`) fills them; the API's subscriptions read them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

log = logging.getLogger("turnwise.live")

T = TypeVar("T")


def eagerly(awaitable: Awaitable[Any]) -> asyncio.Future[Any]:
    """Run `awaitable` at once, in the caller's own step, until it first waits for something: a future
    that is already done when it never did (a send into a socket that takes it at once), else the
    task it goes on in from where it waits. One change sent straight to ten thousand subscriptions
    is then ten thousand calls instead of ten thousand tasks, each made and scheduled."""
    loop = asyncio.get_running_loop()
    coro: Any = awaitable.__await__()
    try:
        waits_for = coro.send(None)
    except StopIteration as stop:
        done = loop.create_future()
        done.set_result(stop.value)
        return done
    except asyncio.CancelledError:
        done = loop.create_future()
        done.cancel()
        return done
    except Exception as exc:  # noqa: BLE001 - handed to the caller, as a task would hand it
        done = loop.create_future()
        done.set_exception(exc)
        return done
    resume = _Resume(coro, waits_for)
    task = asyncio.ensure_future(_resumed(resume))
    task.add_done_callback(resume.cancelled_before_start)
    return task


async def _resumed(resume: _Resume) -> Any:
    return await resume


class _Resume:
    """A coroutine that already ran up to its first wait, as an awaitable: the task awaiting it waits
    for what it was waiting for (handed up as the coroutine handed it), then resumes it from there."""

    __slots__ = ("_coro", "_waits_for")

    def __init__(self, coro: Any, waits_for: Any) -> None:
        self._coro = coro
        self._waits_for = waits_for

    def cancelled_before_start(self, task: asyncio.Future[Any]) -> None:
        """A task cancelled before its first step never resumes the coroutine: the cancellation is
        thrown into it here, where it waits, as it would have been."""
        coro, self._coro, self._waits_for = self._coro, None, None
        if coro is None or not task.cancelled():
            return
        try:
            coro.throw(asyncio.CancelledError())
        except BaseException:  # noqa: BLE001 - it ends with the cancellation, as its task did
            pass
        finally:
            coro.close()

    def __await__(self) -> Any:
        coro, waits_for = self._coro, self._waits_for
        self._coro = self._waits_for = None
        while True:
            try:
                sent = yield waits_for
            except BaseException as exc:  # noqa: BLE001 - thrown on into the coroutine (a cancellation)
                try:
                    waits_for = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waits_for = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


# A mailbox's direct sender (see `Mailbox.direct`): given a value, an awaitable that sends it and
# says whether it did, or None when this value cannot be sent so (its reader then gets it).
Direct = Callable[[Any], Awaitable[bool] | None]


class Mailbox(Generic[T]):
    """The newest value per key, delivered oldest key first.

    With `order`, a value is dropped unless it is newer than both the one waiting for the same key and
    the last one delivered for it, so a snapshot racing a change can never step a subscriber back.
    An idle mailbox holds two small dicts and the future its reader awaits (made when it waits).

    `direct` (set by the reader, optional): a value offered while the reader is idle (waiting, with
    nothing held and no direct send under way) is handed to `direct` instead of waking the reader,
    which costs the reader's whole path per value when one change reaches ten thousand mailboxes.
    Order is kept: a direct send starts only when everything the reader took was already delivered
    (it waits again only then), values offered while it runs wait for it, and those it made stale
    are dropped; a value `direct` declines, or failed to send, goes to the reader as usual.
    """

    __slots__ = ("_items", "_order", "_sending", "_sent", "_waiter", "closed", "direct")

    def __init__(self, order: Callable[[T], Any] | None = None) -> None:
        self._order = order
        # key -> (value, its rank under `order`, or None without one)
        self._items: dict[Hashable, tuple[T, Any]] = {}
        self._sent: dict[Hashable, Any] = {}
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.direct: Direct | None = None
        # The direct send under way: (key, value, rank, its task).
        self._sending: tuple[Hashable, T, Any, asyncio.Future[bool]] | None = None

    def offer(self, key: Hashable, value: T, rank: Any = None) -> None:
        """`rank`: the value's rank under `order`, when the caller has it (one change offered to
        many mailboxes is ranked once)."""
        if self._order is not None:
            if rank is None:
                rank = self._order(value)
            held = self._items.get(key)
            if held is not None and rank < held[1]:
                return
            if key in self._sent and rank <= self._sent[key]:
                return
        if self._sending is None:
            direct, waiter = self.direct, self._waiter
            if direct is not None and waiter is not None and not waiter.done() and not self._items:
                try:
                    started = direct(value)
                except Exception:
                    # A defect of the sender: this value goes the usual way, and so does every later one.
                    log.exception("direct send failed to start", extra={"event": "live.direct_failed"})
                    self.direct = started = None
                if started is not None:
                    sending = eagerly(started)
                    self._sending = (key, value, rank, sending)
                    if sending.done():
                        self._direct_done(sending)
                    else:
                        sending.add_done_callback(self._direct_done)
                    return
        self._items[key] = (value, rank)
        if self._sending is None:
            self._wake()

    def _direct_done(self, task: asyncio.Future[bool]) -> None:
        sending, self._sending = self._sending, None
        if sending is None or sending[3] is not task:
            return
        key, value, rank, _ = sending
        sent = not task.cancelled() and task.exception() is None and task.result() is True
        held = self._items.get(key)
        if sent:
            if self._order is not None:
                self._sent[key] = rank
                if held is not None and held[1] <= rank:
                    del self._items[key]  # offered meanwhile, and no newer than what was just sent
        elif held is None or (self._order is not None and held[1] < rank):
            # Not sent: its reader gets it, unless a newer value for the key came meanwhile.
            self._items[key] = (value, rank)
        if self._items or self.closed:
            self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __len__(self) -> int:
        return len(self._items)

    def __aiter__(self) -> Mailbox[T]:
        return self

    def __anext__(self) -> Awaitable[T]:
        return self.get()  # the coroutine itself: one frame less per value delivered

    async def get(self) -> T:
        """The next value; StopAsyncIteration once closed and drained."""
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        key = next(iter(self._items))
        value, rank = self._items.pop(key)
        if not self._items:
            self._items = {}  # a drained dict keeps its table; an idle mailbox need not
        if self._order is not None:
            self._sent[key] = rank
        return value
