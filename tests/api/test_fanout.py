"""One change fanned out to many subscriptions (`backend/api/fanout.py`): a shared event is executed
once per document and variables and its data encoded once, and every subscription still gets exactly
what executing and encoding it on its own gives (data, errors, the bytes of its `next` message)."""

from __future__ import annotations

import enum
import itertools
import json
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

import pytest
import strawberry
from graphql import GraphQLObjectType
from strawberry.extensions import ParserCache
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.types import ExecutionResult

from backend import jsoncodec
from backend.api import fanout, strawberry_adapter
from backend.api.graphql_core_adapter import PlainFieldExecutor, plain_fields
from backend.api.schema import build_schema


@strawberry.enum
class Kind(enum.Enum):
    ASK = "ask"
    DONE = "done"


@strawberry.type
class Rev:
    epoch: str
    sequence: str


@strawberry.type
class Change:
    id: strawberry.ID
    kind: Kind | None
    rev: Rev
    note: str | None


EVENTS: list[Any] = []


@strawberry.type
class Query:
    @strawberry.field
    def ok(self) -> bool:
        return True


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def changes(self, topic: str) -> AsyncGenerator[Change, None]:
        assert topic  # an argument, so documents differ by variables
        for event in list(EVENTS):
            yield event


def schema(executor: type[StrawberryGraphQLCoreExecutionContext]) -> strawberry.Schema:
    # The parser cache gives every subscription of one text the same document, as the served
    # schema's own policy does.
    return strawberry.Schema(
        query=Query, subscription=Subscription, execution_context_class=executor, extensions=[ParserCache]
    )


PLAIN = schema(PlainFieldExecutor)
CORE = schema(StrawberryGraphQLCoreExecutionContext)

FULL = "subscription($t: String!) { changes(topic: $t) { id kind rev { epoch sequence } note } }"
SOME = """subscription($t: String!, $withRev: Boolean!) {
  changes(topic: $t) { id kind rev @include(if: $withRev) { sequence } } }"""
ALIASED = 'subscription { changes(topic: "x") { __typename a: id b: kind } }'

_keys = itertools.count()


def shared(change: Change) -> Change:
    return fanout.SHARED.event(("test", next(_keys)), lambda: change)


async def results(s: strawberry.Schema, query: str, variables: dict[str, Any] | None = None) -> list[Any]:
    out: list[ExecutionResult] = []
    async for result in await s.subscribe(query, variable_values=variables):
        assert isinstance(result, ExecutionResult)
        out.append(result)
    return out


def shape(rs: list[Any]) -> str:
    return json.dumps(
        [{"data": r.data, "errors": [e.formatted for e in r.errors or ()]} for r in rs], sort_keys=True
    )


SUBSCRIPTIONS: list[tuple[str, dict[str, Any] | None]] = [
    (FULL, {"t": "a"}),
    (FULL, {"t": "a"}),
    (FULL, {"t": "b"}),
    (SOME, {"t": "a", "withRev": True}),
    (SOME, {"t": "a", "withRev": False}),
    (SOME, {"t": "a", "withRev": False}),
    (ALIASED, None),
]


async def test_a_shared_event_is_executed_once_per_document_and_variables_with_the_same_results() -> None:
    EVENTS[:] = [
        shared(Change(id=strawberry.ID("s1"), kind=Kind.ASK, rev=Rev(epoch="1", sequence="7"), note=None)),
        shared(Change(id=strawberry.ID("s1"), kind=None, rev=Rev(epoch="1", sequence="8"), note="n")),
    ]
    got = [await results(PLAIN, q, v) for q, v in SUBSCRIPTIONS]
    for (query, variables), mine in zip(SUBSCRIPTIONS, got, strict=True):
        assert shape(mine) == shape(await results(CORE, query, variables))
    for a, b in ((0, 1), (4, 5)):  # the same document and variables: one result, the same data
        assert all(x.data is y.data for x, y in zip(got[a], got[b], strict=True))
    for a, b in ((0, 2), (3, 4), (0, 3)):  # other variables or another document: executed apart
        assert all(x.data is not y.data for x, y in zip(got[a], got[b], strict=True))
    kept = fanout.SHARED.results_of(EVENTS[0])
    assert kept is not None
    assert len(kept) == 5  # FULL x2 variables, SOME x2 variables, ALIASED


async def test_a_result_with_errors_is_not_shared_and_each_subscription_gets_its_own() -> None:
    broken = shared(Change(id=strawberry.ID("s2"), kind=Kind.DONE, rev=None, note=None))  # type: ignore[arg-type]
    EVENTS[:] = [broken]
    first, second = await results(PLAIN, FULL, {"t": "a"}), await results(PLAIN, FULL, {"t": "a"})
    expected = shape(await results(CORE, FULL, {"t": "a"}))
    assert shape(first) == shape(second) == expected
    assert first[0].errors
    assert fanout.SHARED.results_of(broken) == {}


async def test_values_not_shared_are_executed_for_each_subscription() -> None:
    change = Change(id=strawberry.ID("s3"), kind=Kind.ASK, rev=Rev(epoch="2", sequence="1"), note=None)
    EVENTS[:] = [change]
    first, second = await results(PLAIN, FULL, {"t": "a"}), await results(PLAIN, FULL, {"t": "a"})
    assert fanout.SHARED.results_of(change) is None
    assert first[0].data == second[0].data
    assert first[0].data is not second[0].data


@pytest.mark.parametrize("operation_id", ["1", "0f3c-uuid", 'say "hi"', "back\\slash", "é", "\x01", "\x7f"])
async def test_a_next_message_is_framed_around_the_data_encoded_once(operation_id: str) -> None:
    EVENTS[:] = [
        shared(Change(id=strawberry.ID("s4"), kind=Kind.ASK, rev=Rev(epoch="1", sequence="2"), note="é"))
    ]
    data = (await results(PLAIN, FULL, {"t": "a"}))[0].data
    message = {"id": operation_id, "type": "next", "payload": {"data": data}}
    assert fanout.next_message(message) == jsoncodec.dumps(message)
    assert json.loads(fanout.next_message(message) or "") == message


async def test_other_messages_are_left_to_the_ordinary_encoding() -> None:
    EVENTS[:] = [
        shared(Change(id=strawberry.ID("s5"), kind=None, rev=Rev(epoch="1", sequence="3"), note=None))
    ]
    data = (await results(PLAIN, FULL, {"t": "a"}))[0].data
    assert fanout.next_message({"id": "1", "type": "next", "payload": {"data": dict(data or {})}}) is None
    assert fanout.next_message({"id": "1", "type": "next", "payload": {"data": data, "errors": []}}) is None
    assert fanout.next_message({"type": "next", "id": "1", "payload": {"data": data}}) is None
    assert fanout.next_message({"id": 1, "type": "next", "payload": {"data": data}}) is None
    assert fanout.next_message({"id": "1", "type": "complete"}) is None
    assert fanout.next_message([1, 2]) is None


def test_the_oldest_shared_event_is_forgotten_first_with_its_encodings() -> None:
    events = fanout.SharedEvents(bound=2)
    first = events.event("a", lambda: object())
    assert events.event("a", lambda: object()) is first

    class Result:
        data: ClassVar[dict[str, int]] = {"x": 1}

    kept = events.results_of(first)
    assert kept is not None
    events.keep(kept, ("op", "{}"), "op", Result)
    assert events.encoded(Result.data) == '{"x":1}'
    events.event("b", lambda: object())
    events.event("c", lambda: object())
    assert len(events) == 2
    assert events.results_of(first) is None
    assert events.encoded(Result.data) is None
    assert events.results_of(object()) is None


def test_every_field_of_the_shared_types_is_a_plain_attribute() -> None:
    # A shared event's result is the same for every subscriber only because nothing of the
    # subscriber (context, arguments) can enter it: each field reads an attribute, no resolver.
    served = strawberry_adapter.core_schema(build_schema())
    plain = {t.name: set(fields) for t, fields in plain_fields(served).items()}
    for name in ("SessionProjection", "PendingActionRevision"):
        object_type = served.type_map[name]
        assert isinstance(object_type, GraphQLObjectType)
        assert plain[name] == set(object_type.fields), name
