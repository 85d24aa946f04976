"""The executor that completes plain attribute fields in place gives exactly graphql-core's result
(data, errors, their paths and order) for every shape it shortcuts and every value it must hand
back: each query runs on two schemas that differ only in the executor."""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import strawberry
from starlette.routing import Route
from strawberry.asgi import GraphQL
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from backend.api.app import create_app
from backend.api.graphql_core_adapter import PlainFieldExecutor
from backend.api.scalars import DateTime
from backend.api.schema import build_schema
from backend.config import Settings


@strawberry.enum
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@strawberry.type
class Rev:
    epoch: str
    sequence: str


@strawberry.interface
class Named:
    name: str


@strawberry.type
class Pet(Named):
    legs: int


@strawberry.type
class Item:
    id: strawberry.ID
    title: str
    note: str | None
    colour: Colour | None
    count: int
    at: dt.datetime
    rev: Rev
    maybe_rev: Rev | None
    tags: list[str]
    revs: list[Rev]
    pet: Named | None
    fail: strawberry.Private[bool] = False

    @strawberry.field
    def shout(self, suffix: str = "!") -> str:
        if self.fail:
            raise ValueError("shout failed")
        return self.title.upper() + suffix

    @strawberry.field
    async def later(self) -> Rev:
        return self.rev


NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)


def item(i: int, **over: Any) -> Item:
    values: dict[str, Any] = {
        "id": strawberry.ID(f"i{i}"),
        "title": f"item {i}",
        "note": None if i % 2 else f"note {i}",
        "colour": Colour.RED if i % 3 else None,
        "count": i,
        "at": NOW,
        "rev": Rev(epoch="1", sequence=str(i)),
        "maybe_rev": None if i % 2 else Rev(epoch="2", sequence=str(i)),
        "tags": [f"t{i}", "x"],
        "revs": [Rev(epoch="3", sequence=str(j)) for j in range(i % 3)],
        "pet": Pet(name="rex", legs=4) if i % 2 else None,
    }
    values.update(over)
    return Item(**values)


async def a_rev() -> Rev:
    return Rev(epoch="9", sequence="9")


def rows(kind: str) -> list[Item]:
    good = [item(i) for i in range(6)]
    variants: dict[str, dict[str, Any]] = {
        "good": {},
        "null_in_non_null": {"title": None},
        "null_in_non_null_object": {"rev": None},
        "null_list_item": {"tags": ["a", None]},
        "bad_enum": {"colour": "green"},
        "int_for_string": {"title": 5},
        "dict_for_object": {"rev": {"epoch": "1", "sequence": "2"}},
        "generator_for_list": {"tags": (t for t in ("g1", "g2"))},
        "awaitable_object": {},
        "exception_value": {"note": ValueError("stored error")},
        "naive_datetime": {"at": dt.datetime(2026, 1, 2, 3, 4, 5)},
        "resolver_error": {"fail": True},
    }
    bad = {"maybe_rev": a_rev()} if kind == "awaitable_object" else variants[kind]
    good[3] = item(3, **bad)
    return good


@strawberry.type
class Query:
    @strawberry.field
    def items(self, kind: str) -> list[Item]:
        return rows(kind)

    @strawberry.field
    async def items_later(self, kind: str) -> list[Item]:
        return rows(kind)


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def items(self, kind: str) -> AsyncGenerator[Item, None]:
        for i, value in enumerate(rows(kind)):
            yield value if i != 3 else item(3, title=None)


def schema(executor: type[StrawberryGraphQLCoreExecutionContext]) -> strawberry.Schema:
    return strawberry.Schema(
        query=Query,
        subscription=Subscription,
        types=[Pet],
        config=StrawberryConfig(scalar_map={dt.datetime: DateTime}),
        execution_context_class=executor,
    )


FULL = """
{ root: ITEMS {
    __typename id title note colour count at
    rev { epoch sequence __typename }
    maybeRev { epoch sequence }
    tags
    revs { sequence }
    alias: title
    ... on Item { count rev { epoch } }
} }
"""

QUERIES = {
    "full": FULL,
    "resolvers": '{ root: ITEMS { id shout shoutQ: shout(suffix: "?") later { sequence } } }',
    "interface": "{ root: ITEMS { id pet { __typename name ... on Pet { legs } } } }",
    "directives": "query($x: Boolean!) { root: ITEMS { id title @include(if: $x) note @skip(if: $x) "
    "rev @include(if: true) { epoch } } }",
    "fragment": "fragment F on Rev { epoch sequence } { root: ITEMS { rev { ...F } revs { ...F } } }",
}
KINDS = [
    "good",
    "null_in_non_null",
    "null_in_non_null_object",
    "null_list_item",
    "bad_enum",
    "int_for_string",
    "dict_for_object",
    "generator_for_list",
    "awaitable_object",
    "exception_value",
    "naive_datetime",
    "resolver_error",
]


async def run(s: strawberry.Schema, query: str) -> str:
    result = await s.execute(query, variable_values={"x": True})
    out = {"data": result.data, "errors": [e.formatted for e in result.errors or []]}
    return json.dumps(out, sort_keys=False, default=str)


# A query that does not select the field holding the coroutine leaves it unawaited.
@pytest.mark.filterwarnings("ignore:coroutine 'a_rev' was never awaited:RuntimeWarning")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("root", ["items", "itemsLater"])
async def test_same_result_as_graphql_core(name: str, kind: str, root: str) -> None:
    query = QUERIES[name].replace("ITEMS", f'{root}(kind: "{kind}")')
    plain = await run(schema(PlainFieldExecutor), query)
    reference = await run(schema(StrawberryGraphQLCoreExecutionContext), query)
    assert plain == reference


async def events(s: strawberry.Schema, query: str) -> list[str]:
    out = []
    async for result in await s.subscribe(query):
        data = {"data": result.data, "errors": [e.formatted for e in result.errors or []]}
        out.append(json.dumps(data, default=str))
    return out


async def test_subscription_events_same_as_graphql_core() -> None:
    """Each event's executor completes the payload, a null in a non-null field included."""
    query = 'subscription { items(kind: "good") { id title rev { epoch sequence } tags } }'
    plain = await events(schema(PlainFieldExecutor), query)
    reference = await events(schema(StrawberryGraphQLCoreExecutionContext), query)
    assert plain == reference
    assert len(plain) == 6
    assert "Cannot return null" in plain[3]


class Counting(PlainFieldExecutor):
    fields = 0

    def execute_field(self, *args: Any, **kwargs: Any) -> Any:
        Counting.fields += 1
        return super().execute_field(*args, **kwargs)


async def test_plain_fields_skip_the_per_field_path() -> None:
    Counting.fields = 0
    result = await schema(Counting).execute('{ items(kind: "good") { id title rev { epoch } tags } }')
    assert result.errors is None
    assert Counting.fields == 1  # the root field only: every Item field was completed in place


@pytest.mark.parametrize(
    "off", [None, "TURNWISE_GRAPHQL_CORE_ADAPTER", "TURNWISE_WS_ADAPTER"], ids=["on", "off", "strawberry-off"]
)
def test_the_served_schema_uses_it_unless_switched_off(
    off: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Off (the graphql-core adapter's switch, or the Strawberry adapter's, whose names it reads), the
    schema executes with Strawberry's own executor."""
    for name in ("TURNWISE_GRAPHQL_CORE_ADAPTER", "TURNWISE_WS_ADAPTER"):
        monkeypatch.delenv(name, raising=False)
    if off is not None:
        monkeypatch.setenv(off, "0")
    expected = PlainFieldExecutor if off is None else StrawberryGraphQLCoreExecutionContext
    assert build_schema().execution_context_class is expected
    assert build_schema(plain_fields=False).execution_context_class is StrawberryGraphQLCoreExecutionContext
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    assert _served_executor(Settings.from_env().model_copy(update={"database_url": database_url})) is expected
    unadapted = Settings(database_url=database_url, graphql_core_adapter=False)
    assert _served_executor(unadapted) is StrawberryGraphQLCoreExecutionContext


def _served_executor(settings: Settings) -> Any:
    app = create_app(settings)
    (view,) = [r.endpoint for r in app.routes if isinstance(r, Route) and r.path == "/graphql"]
    assert isinstance(view, GraphQL)
    return view.schema.execution_context_class  # type: ignore[attr-defined]
