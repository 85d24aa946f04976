"""Compiled input builders give exactly the objects Strawberry's own conversion builds: every query
runs on two schemas whose input types differ only in `compiled_input`, and the real clarification
inputs convert the same with and without their builder.

No `from __future__ import annotations` here: the input types are made inside a function, and
Strawberry must resolve their annotations there."""

import enum
from typing import Any

import pytest
import strawberry
from strawberry.types.arguments import convert_argument

from backend.api.clarifications import (
    ClarificationAnswerInput,
    ClarificationOptionInput,
    ClarificationQuestionInput,
)
from backend.api.inputs import compiled_input
from backend.api.schema import build_schema


@strawberry.enum
class Shade(enum.Enum):
    LIGHT = "light"
    DARK = "dark"


def _inputs(compiled: bool) -> type:
    wrap = compiled_input if compiled else (lambda cls: cls)

    @wrap
    @strawberry.input(name="Leaf")
    class Leaf:
        id: strawberry.ID | None = None
        label: str
        weight: float | None = None
        shade: Shade = Shade.LIGHT
        tags: list[str] | None = strawberry.field(default_factory=list)

    @wrap
    @strawberry.input(name="Branch")
    class Branch:
        title: str | None = None
        count: int
        flag: bool | None = False
        leaves: list[Leaf]
        maybe_leaves: list[Leaf | None] | None = None
        nickname: strawberry.Maybe[str | None]
        shades: list[Shade] = strawberry.field(default_factory=list)
        ids: list[strawberry.ID]

    @strawberry.type
    class Query:
        @strawberry.field
        def echo(self, branch: Branch, extra: list[Branch] | None = None) -> str:
            return repr((branch, extra))

    return Query


def _schemas() -> tuple[strawberry.Schema, strawberry.Schema]:
    return strawberry.Schema(query=_inputs(False)), strawberry.Schema(query=_inputs(True))


BRANCHES: list[dict[str, Any]] = [
    {"count": 1, "leaves": [], "ids": []},
    {
        "title": "t",
        "count": 2,
        "flag": None,
        "leaves": [{"label": "a"}, {"id": "x", "label": "b", "weight": 1.5, "shade": "DARK", "tags": ["p"]}],
        "maybeLeaves": [None, {"label": "c", "tags": None}],
        "nickname": None,
        "shades": ["DARK", "LIGHT"],
        "ids": ["1", "2"],
    },
    {"count": 3, "leaves": [{"label": "d", "tags": []}], "maybeLeaves": None, "nickname": "n", "ids": ["9"]},
]

QUERY = "query($b: Branch!, $e: [Branch!]) { echo(branch: $b, extra: $e) }"


@pytest.mark.parametrize("branch", BRANCHES)
async def test_a_compiled_input_builds_what_strawberry_builds(branch: dict[str, Any]) -> None:
    plain, compiled = _schemas()
    for variables in ({"b": branch}, {"b": branch, "e": BRANCHES}, {"b": branch, "e": None}):
        expected = await plain.execute(QUERY, variable_values=variables)
        got = await compiled.execute(QUERY, variable_values=variables)
        assert expected.errors is None
        assert got.errors is None
        assert got.data == expected.data


async def test_literals_and_defaults_build_the_same() -> None:
    plain, compiled = _schemas()
    query = '{ echo(branch: {count: 4, leaves: [{label: "x", shade: DARK}], ids: ["7"], nickname: "k"}) }'
    expected = await plain.execute(query)
    got = await compiled.execute(query)
    assert expected.errors is None
    assert got.data == expected.data


def _convert(value: Any, type_: Any, *, compiled: bool) -> Any:
    classes: list[Any] = [ClarificationOptionInput, ClarificationQuestionInput, ClarificationAnswerInput]
    definitions = [c.__strawberry_definition__ for c in classes]
    saved = [d.from_input for d in definitions]
    try:
        if not compiled:
            for d in definitions:
                d.from_input = None
        schema = build_schema()
        converter = schema.schema_converter
        return convert_argument(value, type_, converter.scalar_registry, schema.config)
    finally:
        for d, hook in zip(definitions, saved, strict=True):
            d.from_input = hook


@pytest.mark.parametrize(
    ("value", "type_"),
    [
        ({"prompt": "p", "options": []}, ClarificationQuestionInput),
        (
            {
                "id": "q1",
                "title": None,
                "prompt": "which?",
                "multiSelect": True,
                "options": [{"label": "a"}, {"id": "o2", "label": "b", "description": None}],
            },
            ClarificationQuestionInput,
        ),
        ({"questionId": "q1"}, ClarificationAnswerInput),
        ({"questionId": "q1", "selectedOptionIds": ["a", "b"], "customText": "x"}, ClarificationAnswerInput),
        ({"label": "only"}, ClarificationOptionInput),
    ],
)
def test_the_clarification_inputs_build_as_strawberry_builds_them(value: dict[str, Any], type_: type) -> None:
    assert getattr(type_.__strawberry_definition__.from_input, "compiled", False)  # type: ignore[attr-defined]
    assert _convert(value, type_, compiled=True) == _convert(value, type_, compiled=False)


def test_compiled_input_refuses_what_is_not_an_input() -> None:
    @strawberry.type
    class Out:
        x: int

    with pytest.raises(TypeError):
        compiled_input(Out)
