"""One change, many subscriptions: executed once per document and encoded once per process.

A change of a session's projection reaches every `pendingActionChanged` subscription whose scope covers
it, ten thousand on one process when every phone and tab of a task watches it. Each subscription is
still an operation of its own (its own task and id on its connection, as graphql-transport-ws has it),
but what they all send is the same:

- the value yielded for one projection is one object per process (`SharedEvents.event`, keyed by what
  the value is made of), also for the snapshots that subscriptions read when they start;
- the schema's executor (`backend/api/graphql_core_adapter.py`) executes such a shared event once per document
  and variables: the first subscription to see it executes it, every other one with the same document
  and variables takes that result as it is. Only a result without errors is kept, and only values of
  a type whose every field reads a plain attribute are shared (nothing of the subscriber's context or
  arguments can enter the result; `tests/api/test_fanout.py` checks the types shared);
- the view's `encode_json` (`backend/api/graphql_view.py`) encodes that result's data once and frames
  each subscription's `next` message around the same text.

Entries are bounded (the oldest event is forgotten first); a subscription that meets a forgotten event
executes and encodes it itself, as every subscription did before.

And each change is sent to an idle subscription directly (`direct_sender`): the hub's mailbox hands
the value to the subscription's sender instead of waking its reader, and the sender executes the
event with the subscription's own executor (graphql-core's `execute_subscription_event`, the same
shared result) and sends the `next` message Strawberry would send for it
(`strawberry_adapter.send_next_data`). What that skips, per subscription and change: the
subscription's generator, graphql-core's mapping of its stream and Strawberry's stream of results,
about a third of a fan-out's CPU. A result with errors, or an event before the subscription's first,
goes the usual way (its errors are masked and logged there); so does everything when the adapter is
off or the schema has an extension that must see each result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from graphql import ExecutionResult, execute_subscription_event

from backend import jsoncodec, metrics
from backend.api import strawberry_adapter, ws_operations
from backend.services.mailbox import Direct

T = TypeVar("T")


class _Shared:
    __slots__ = ("event", "key", "results")

    def __init__(self, key: Hashable, event: Any) -> None:
        self.key = key
        self.event = event
        # (operation node id, variables text) -> (operation node, result); the node is held, so its
        # id is not reused while the entry exists.
        self.results: dict[Hashable, tuple[Any, Any]] = {}


class SharedEvents:
    def __init__(self, bound: int = 2048) -> None:
        self.bound = bound
        self._by_key: dict[Hashable, _Shared] = {}
        self._by_id: dict[int, _Shared] = {}
        # id(result data) -> [data, its JSON text once encoded]; the data is held, so its id is not reused.
        self._data: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def event(self, key: Hashable, make: Callable[[], T]) -> T:
        """The one value for `key`, made on first use. `make` must return a value of a type whose
        every field is a plain attribute (see the module's docstring)."""
        shared = self._by_key.get(key)
        if shared is None:
            while len(self._by_key) >= self.bound:
                self._forget(next(iter(self._by_key.values())))
            shared = _Shared(key, make())
            self._by_key[key] = shared
            self._by_id[id(shared.event)] = shared
        event: T = shared.event
        return event

    def _forget(self, shared: _Shared) -> None:
        del self._by_key[shared.key]
        del self._by_id[id(shared.event)]
        for _, result in shared.results.values():
            self._data.pop(id(result.data), None)

    def results_of(self, event: Any) -> dict[Hashable, tuple[Any, Any]] | None:
        """The results kept for a shared event, or None for any other value."""
        shared = self._by_id.get(id(event))
        return shared.results if shared is not None and shared.event is event else None

    def keep(
        self, results: dict[Hashable, tuple[Any, Any]], key: Hashable, operation: Any, result: Any
    ) -> None:
        """A shared event's result for one document and variables (`result.data` is then encoded once)."""
        if results.get(key) is not None:
            return
        results[key] = (operation, result)
        if result.data is not None:
            self._data[id(result.data)] = [result.data, None]

    def encoded(self, data: Any) -> str | None:
        """The JSON text of a kept result's data (encoded on first use), or None for any other data."""
        entry = self._data.get(id(data))
        if entry is None or entry[0] is not data:
            return None
        if entry[1] is None:
            entry[1] = jsoncodec.dumps(data)
        text: str = entry[1]
        return text


# The process's shared events: the fan-out of one change is one process's work.
SHARED = SharedEvents()


def next_message(message: object) -> str | None:
    """A graphql-transport-ws `next` message whose data is a kept result's, framed around its text;
    None for any other message. Exactly what encoding the whole message gives."""
    if type(message) is not dict or len(message) != 3 or message.get("type") != "next":
        return None
    payload = message.get("payload")
    operation_id = message.get("id")
    if type(payload) is not dict or len(payload) != 1 or type(operation_id) is not str:
        return None
    if tuple(message) != ("id", "type", "payload") or "data" not in payload:
        return None
    text = SHARED.encoded(payload["data"])
    if text is None:
        return None
    if (
        operation_id.isascii()
        and operation_id.isprintable()
        and '"' not in operation_id
        and "\\" not in operation_id
    ):
        quoted = '"' + operation_id + '"'  # what JSON makes of it: nothing to escape
    else:
        quoted = jsoncodec.dumps(operation_id)
    return '{"id":' + quoted + ',"type":"next","payload":{"data":' + text + "}}"


def direct_sender(event_of: Callable[[Any], Any]) -> Direct | None:
    """A sender for the subscription that the current task runs (None where its results cannot be sent
    directly: see `ws_operations.running_operation`). `event_of` makes the subscription's event of
    a value offered to it, as its generator would yield it."""
    running = ws_operations.running_operation()
    if running is None:
        return None

    def send(value: Any) -> Awaitable[bool] | None:
        executor = running.executor
        if executor is None:
            return None  # no event executed yet: the first goes the usual way, which records it
        result = execute_subscription_event(executor.build_per_event_executor(event_of(value)))
        if not isinstance(result, ExecutionResult):
            return _send_when_executed(running, result)
        if result.errors:
            return None
        sends.add()
        return strawberry_adapter.send_next_data(running, result.data)

    sends = metrics.DIRECT_SENDS
    return send


async def _send_when_executed(running: ws_operations.RunningOperation, pending: Awaitable[Any]) -> bool:
    result = await pending
    if result.errors:
        return False  # the usual way then executes it again, and masks and logs its errors
    return await strawberry_adapter.send_next_data(running, result.data)
