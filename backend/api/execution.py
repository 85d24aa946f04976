"""Field execution without per-field resolver machinery for plain attributes.

Strawberry gives every field a resolver, even one that only reads an attribute, and graphql-core
builds a resolve-info object for each call. A list of 1,000 tasks with their sessions is about
20,000 such fields, which cost more than reading the rows. This executor reads a plain field's
attribute directly and completes the value as graphql-core would; anything out of the ordinary
(a resolver, arguments, field middleware, an awaitable or missing value in a non-null field, a
completion error) takes graphql-core's own path, which also reports errors exactly as before.
"""

from __future__ import annotations

import datetime as dt
import enum
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from graphql import (
    GraphQLField,
    GraphQLLeafType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    is_leaf_type,
    is_object_type,
)
from graphql.execution.collect_fields import GroupedFieldSet
from graphql.pyutils import Path, Undefined, gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

_UNSET = object()
# Values a leaf reads as they are: never awaitable, never an error to raise.
_PLAIN_VALUES = frozenset({str, int, float, bool, dt.datetime, dt.date})


@dataclass(frozen=True, slots=True)
class Plain:
    """A field that returns an attribute of its source as it is (Strawberry's default resolver)."""

    attr: str
    return_type: GraphQLOutputType
    non_null: bool
    # Exactly one of these: a scalar or enum, or an object type without an `is_type_of` check.
    leaf: GraphQLLeafType | None
    object_type: GraphQLObjectType | None


def plain_field(field: GraphQLField) -> Plain | None:
    definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if not isinstance(definition, StrawberryField) or field.args or field.resolve is None:
        return None
    if not getattr(field.resolve, "_is_default", False) or not definition.is_basic_field:
        return None
    if definition.default_resolver is not getattr or not definition.python_name:
        return None
    inner = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
    leaf = inner if is_leaf_type(inner) else None
    obj = inner if is_object_type(inner) and inner.is_type_of is None else None  # type: ignore[union-attr]
    if leaf is None and obj is None:
        return None
    return Plain(
        attr=definition.python_name,
        return_type=field.type,
        non_null=isinstance(field.type, GraphQLNonNull),
        leaf=leaf,  # type: ignore[arg-type]
        object_type=obj,  # type: ignore[arg-type]
    )


_plain_by_schema: weakref.WeakKeyDictionary[GraphQLSchema, dict[GraphQLObjectType, dict[str, Plain]]] = (
    weakref.WeakKeyDictionary()
)


def plain_fields(schema: GraphQLSchema) -> dict[GraphQLObjectType, dict[str, Plain]]:
    """Per object type, its plain fields by name; worked out once per schema."""
    known = _plain_by_schema.get(schema)
    if known is None:
        known = {}
        for named in schema.type_map.values():
            if isinstance(named, GraphQLObjectType):
                fields = {name: p for name, f in named.fields.items() if (p := plain_field(f)) is not None}
                if fields:
                    known[named] = fields
        _plain_by_schema[schema] = known
    return known


class PlainFieldExecutor(StrawberryGraphQLCoreExecutionContext):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        manager = self.middleware_manager
        # Field middleware (an extension with a `resolve` hook) must see every field.
        self._plain = {} if manager is not None and manager.middlewares else plain_fields(self.schema)

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> Any:
        """graphql-core's loop, except that a plain scalar or enum field whose attribute holds an
        ordinary value is completed in place (no path, resolver, info or awaitable check)."""
        fields = self._plain.get(parent_type)
        if fields is None:
            return super().execute_fields(parent_type, source_value, path, grouped_field_set, position_context)
        results: dict[str, Any] = {}
        is_awaitable = self.is_awaitable
        awaitable_fields: list[str] = []
        try:
            for response_name, field_details_list in grouped_field_set.items():
                node = field_details_list[0].node
                spec = fields.get(node.name.value)
                if spec is not None and spec.leaf is not None and not node.arguments:
                    value = self._leaf(spec, spec.leaf, source_value)
                    if value is not _UNSET:
                        results[response_name] = value
                        continue
                result = self.execute_field(
                    parent_type,
                    source_value,
                    field_details_list,
                    Path(path, response_name, parent_type.name),
                    position_context,
                )
                if result is not Undefined:
                    results[response_name] = result
                    if is_awaitable(result):
                        awaitable_fields.append(response_name)
        except Exception:
            if awaitable_fields:
                self.settle_in_background([results[field] for field in awaitable_fields])
            raise
        if not awaitable_fields:
            return results

        async def get_results() -> dict[str, Any]:
            if len(awaitable_fields) == 1:
                field = awaitable_fields[0]
                results[field] = await results[field]
            else:
                awaited = await gather_with_cancel(*(results[field] for field in awaitable_fields))
                results.update(zip(awaitable_fields, awaited, strict=True))
            return results

        return get_results()

    @staticmethod
    def _leaf(spec: Plain, leaf: GraphQLLeafType, source: Any) -> Any:
        """The completed value, or _UNSET for graphql-core's own path (which reads it again and
        reports any error as it always did)."""
        try:
            value = getattr(source, spec.attr)
            if value is None:
                return _UNSET if spec.non_null else None
            if type(value) not in _PLAIN_VALUES and not isinstance(value, enum.Enum):
                return _UNSET
            coerced = leaf.coerce_output_value(value)
        except Exception:
            return _UNSET
        return _UNSET if coerced is None or coerced is Undefined else coerced

    def execute_field(
        self,
        parent_type: GraphQLObjectType,
        source: Any,
        field_details_list: Any,
        path: Path,
        position_context: Any,
    ) -> Any:
        fields = self._plain.get(parent_type)
        spec = None if fields is None else fields.get(field_details_list[0].node.name.value)
        if spec is None or field_details_list[0].node.arguments:
            return super().execute_field(parent_type, source, field_details_list, path, position_context)
        try:
            value = getattr(source, spec.attr)
        except Exception:
            value = _UNSET
        if value is None and not spec.non_null:
            return None
        if value is None or value is _UNSET or self.is_awaitable(value) or isinstance(value, Exception):
            return super().execute_field(parent_type, source, field_details_list, path, position_context)
        try:
            if spec.leaf is not None:
                return self.complete_leaf_value(spec.leaf, value)
            completed = self.complete_object_value(
                spec.object_type,  # type: ignore[arg-type]
                field_details_list,
                None,  # type: ignore[arg-type]  # read by `is_type_of` only, which plain types lack
                path,
                value,
                position_context,
            )
        except Exception as raw_error:
            self.handle_field_error(raw_error, spec.return_type, field_details_list, path)
            return None
        if self.is_awaitable(completed):
            return self._settle(completed, spec.return_type, field_details_list, path)
        return completed

    async def _settle(
        self, completed: Awaitable[Any], return_type: GraphQLOutputType, field_details_list: Any, path: Path
    ) -> Any:
        try:
            return await completed
        except Exception as raw_error:
            self.handle_field_error(raw_error, return_type, field_details_list, path)
            return None
