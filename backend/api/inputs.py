"""Input objects built straight from their GraphQL value, with a builder compiled once per type.

Strawberry converts an input object field by field on every request: it resolves each field's type,
converts its GraphQL name and walks the value's type again for every list item. An
`askClarification` with a few questions and their options spends more CPU there than on its whole
storage round trip. `compiled_input` gives an input type a builder made once per schema
configuration (GraphQL name, Python name and a converter per field), through Strawberry's own hook
for types that build their own value (`StrawberryObjectDefinition.from_input`).

The builder handles what our inputs are made of: built-in scalars and IDs, optional values, lists,
and nested compiled inputs. A field of any other type (an enum, a custom scalar, a `Maybe`) is
converted by Strawberry itself (`InputContext.convert`), so the result is always what Strawberry
would build. Omitted fields keep the class default, or None where the class has none, exactly as
Strawberry's own conversion does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from strawberry.types.arguments import InputContext
from strawberry.types.base import (
    StrawberryList,
    StrawberryMaybe,
    StrawberryObjectDefinition,
    StrawberryOptional,
)
from strawberry.types.field import StrawberryField

T = TypeVar("T", bound=type)

# A converter of a non-null value; None where Strawberry must convert the value itself.
Convert = Callable[[Any, InputContext], Any]
Builder = Callable[[type, Mapping[str, Any], InputContext], Any]

_LEAVES: frozenset[object] = frozenset({str, int, float, bool})


def _identity(value: Any, _ctx: InputContext) -> Any:
    return value


def _converter(type_: Any) -> Convert | None:
    if isinstance(type_, StrawberryMaybe):
        return None  # Some(...) wrapping and its null rules stay Strawberry's
    if isinstance(type_, StrawberryOptional):
        return _converter(type_.of_type)  # a null is handled before any converter runs
    if isinstance(type_, StrawberryList):
        item = _converter(type_.of_type)
        if item is None:
            return None
        if item is _identity:
            # Copied, as Strawberry does: graphql-core may hand every request the same default list.
            return lambda value, _ctx: list(value)
        return lambda value, ctx: [None if v is None else item(v, ctx) for v in value]
    if type_ in _LEAVES or getattr(type_, "__supertype__", None) in _LEAVES:  # strawberry.ID is a NewType
        return _identity
    definition = getattr(type_, "__strawberry_definition__", None)
    build = definition.from_input if isinstance(definition, StrawberryObjectDefinition) else None
    if build is not None and getattr(build, "compiled", False):
        return lambda value, ctx: build(type_, value, ctx)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    graphql_name: str
    python_name: str
    type_: Any
    convert: Convert | None


def _compile(definition: StrawberryObjectDefinition, ctx: InputContext) -> Builder:
    fields: list[_Field] = []
    unset: dict[str, None] = {}
    for field in definition.fields:
        if not isinstance(field, StrawberryField) or not field.python_name:
            raise TypeError(f"{definition.name}: a field without a Python name")
        type_ = field.resolve_type(type_definition=definition)
        fields.append(
            _Field(ctx.config.name_converter.from_field(field), field.python_name, type_, _converter(type_))
        )
        if field.default_value is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            unset[field.python_name] = None
    plan = tuple(fields)

    def build(target: type, value: Mapping[str, Any], ctx: InputContext) -> Any:
        kwargs: dict[str, Any] = dict(unset)
        for f in plan:
            if f.graphql_name in value:
                v = value[f.graphql_name]
                if f.convert is None:
                    kwargs[f.python_name] = ctx.convert(v, f.type_, f.graphql_name)
                else:
                    kwargs[f.python_name] = None if v is None else f.convert(v, ctx)
        return target(**kwargs)

    return build


def compiled_input(cls: T) -> T:
    """Class decorator, under `@strawberry.input`: build this input with a compiled builder."""
    definition = cls.__strawberry_definition__  # type: ignore[attr-defined]
    if not isinstance(definition, StrawberryObjectDefinition) or not definition.is_input:
        raise TypeError(f"{cls.__name__} is not a Strawberry input type")
    # One builder per schema configuration (GraphQL names depend on it); a schema keeps one.
    builders: list[tuple[object, Builder]] = []

    def from_input(target: type, value: Mapping[str, Any], ctx: InputContext) -> Any:
        for config, build in builders:
            if config is ctx.config:
                return build(target, value, ctx)
        build = _compile(definition, ctx)
        builders[:] = [*builders[-3:], (ctx.config, build)]
        return build(target, value, ctx)

    from_input.compiled = True  # type: ignore[attr-defined]
    definition.from_input = from_input
    return cls
