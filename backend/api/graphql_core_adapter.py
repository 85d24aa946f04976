"""graphql-core's executor internals, which the API's executor relies on: here, and nowhere else.

Checked against (`CHECKED`): graphql-core 3.3.2. The canary (`tests/api/test_graphql_core_adapter.py`)
checks that each name of `RELIED_ON` still exists with the shape used here, and fails while the
installed version differs from `CHECKED`, naming what to re-check. `TURNWISE_GRAPHQL_CORE_ADAPTER=0`
(`Settings.graphql_core_adapter`; also `TURNWISE_WS_ADAPTER=0`, since the executor reads Strawberry's
schema through `backend/api/strawberry_adapter.py`) turns it off: the schema then executes with
Strawberry's own executor, unchanged, and shared subscription results and direct sends
(`backend/api/fanout.py`), which need this executor, are off with it.

What it is for: completing plain attribute fields without graphql-core's per-field machinery.
Strawberry gives every field a resolver, even one that only reads an attribute, and graphql-core
builds a path, a resolve-info object and about eight nested calls for each field and each object.
A list of 1,000 tasks with their sessions is about 20,000 fields, which cost more than reading the
rows. This executor compiles, once per request and selection, a completion for values whose whole
selection is plain: scalars and enums read from attributes (Strawberry's default resolver, no
arguments), objects without an `is_type_of` check, lists of those, `__typename`. Such a value is
completed directly. Anything out of the ordinary (a resolver, a directive other than
@include/@skip, field middleware, a null in a non-null position, a value of another type, a
coercion failure) abandons the shortcut for that value and takes graphql-core's own path from the
start, which reads the same attributes again (plain reads have no side effects) and reports errors
exactly as it always did.

The names, and why there is no public way: graphql-core lets a subclass of its `Executor` (public)
be passed as the executor class, but says that "the methods used internally for executing and
completing fields are not part of the public API". Overridden, each calling graphql-core's own for
everything it does not shortcut: `Executor.execute_fields(self, parent_type, source_value, path,
grouped_field_set, position_context)`, `Executor.complete_value(self, return_type,
field_details_list, info, path, result, position_context)`, `Executor.build_per_event_executor(self,
payload)` (a copy of the executor per subscription event; `backend/api/fanout.py` calls it too) and
`Executor.execute_operation(self, serially)`. Called: `Executor.execute_field(self, parent_type,
source, field_details_list, path, position_context)`, `Executor.collect_subfields(self, return_type,
field_details_list)` (grouped fields, defer usages, and one more), `Executor.settle_in_background(self,
awaitables)`. Read: the executor's `schema`, `operation`, `variable_values` (its `coerced` values),
`middleware_manager` and `is_awaitable`. From `graphql.execution.collect_fields` (not exported by
`graphql.execution`): `FieldDetailsList`, `GroupedFieldSet` and a `FieldDetails`' `node`,
`defer_usage` and `fragment_variable_values`. And `graphql.pyutils.gather_with_cancel`, graphql-core's
own way to await a field group's results (exported by `graphql.pyutils`, documented nowhere).

What it saves, measured with the switch on and off in one process (interleaved rounds, in-process
HTTP): the `tasks` list of 1,000 tasks with 3 sessions each (bench/api.py's query) took 1.27 to 1.37
times as long off; a small operation (`{ __typename }`) the same either way.
"""

from __future__ import annotations

import datetime as dt
import enum
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, cast

import orjson
from graphql import (
    ExecutionResult,
    Executor,
    GraphQLField,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    OperationType,
    is_leaf_type,
    is_object_type,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.pyutils import Path, Undefined, gather_with_cancel

from backend.api import strawberry_adapter, ws_operations
from backend.api.fanout import SHARED
from backend.api.strawberry_adapter import Reliance
from backend.config import env_switch

# The library versions the names below were read and checked against.
CHECKED = {"graphql-core": "3.3.2"}

_EXECUTOR = "graphql.execution.executor:Executor"
_COLLECT = "graphql.execution.collect_fields"

RELIED_ON: tuple[Reliance, ...] = (
    Reliance(
        "graphql-core",
        _EXECUTOR,
        "execute_fields",
        "function",
        ("self", "parent_type", "source_value", "path", "grouped_field_set", "position_context"),
    ),
    Reliance(
        "graphql-core",
        _EXECUTOR,
        "complete_value",
        "function",
        ("self", "return_type", "field_details_list", "info", "path", "result", "position_context"),
    ),
    Reliance("graphql-core", _EXECUTOR, "build_per_event_executor", "function", ("self", "payload")),
    Reliance("graphql-core", _EXECUTOR, "execute_operation", "function", ("self", "serially")),
    Reliance(
        "graphql-core",
        _EXECUTOR,
        "execute_field",
        "function",
        ("self", "parent_type", "source", "field_details_list", "path", "position_context"),
    ),
    Reliance(
        "graphql-core",
        _EXECUTOR,
        "collect_subfields",
        "function",
        ("self", "return_type", "field_details_list"),
    ),
    Reliance("graphql-core", _EXECUTOR, "settle_in_background", "function", ("self", "awaitables")),
    Reliance("graphql-core", _EXECUTOR, "is_awaitable", "attribute"),
    Reliance("graphql-core", _EXECUTOR, "schema", "instance attribute"),
    Reliance("graphql-core", _EXECUTOR, "operation", "instance attribute"),
    Reliance("graphql-core", _EXECUTOR, "variable_values", "instance attribute"),
    Reliance("graphql-core", _EXECUTOR, "middleware_manager", "instance attribute"),
    Reliance("graphql-core", "graphql.execution.values:VariableValues", "coerced", "attribute"),
    Reliance("graphql-core", _COLLECT, "FieldDetailsList", "attribute"),
    Reliance("graphql-core", _COLLECT, "GroupedFieldSet", "attribute"),
    Reliance("graphql-core", f"{_COLLECT}:FieldDetails", "node", "attribute"),
    Reliance("graphql-core", f"{_COLLECT}:FieldDetails", "defer_usage", "attribute"),
    Reliance("graphql-core", f"{_COLLECT}:FieldDetails", "fragment_variable_values", "attribute"),
    Reliance("graphql-core", "graphql.pyutils", "gather_with_cancel", "coroutine"),
)


def installed_versions() -> dict[str, str]:
    return {name: version(name) for name in CHECKED}


def switched_on() -> bool:
    """TURNWISE_GRAPHQL_CORE_ADAPTER, read as `Settings.from_env` reads it (on unless "0", "false" or
    "no"), and the Strawberry adapter's switch (`strawberry_adapter.switched_on`)."""
    return env_switch("TURNWISE_GRAPHQL_CORE_ADAPTER") and strawberry_adapter.switched_on()


def executor_class(on: bool = True) -> type[Executor[Any]] | None:
    """`PlainFieldExecutor` while `on` and switched on (read now); else None: the schema then
    executes with Strawberry's own executor."""
    return PlainFieldExecutor if on and switched_on() else None


Completion = Callable[[Any], Any]

# Values a leaf takes as they are: never awaitable, never an error to raise.
_PLAIN_VALUES = frozenset({str, int, float, bool, dt.datetime, dt.date})
# Directives fully applied when fields are collected; any other one keeps graphql-core's path.
_COLLECTION_DIRECTIVES = frozenset({"include", "skip"})


class Abandon(Exception):
    """The value is not plain after all: graphql-core completes it."""


@dataclass(frozen=True, slots=True)
class Plain:
    """A field that returns an attribute of its source as it is (Strawberry's default resolver)."""

    attr: str
    return_type: GraphQLOutputType


def plain_field(field: GraphQLField) -> Plain | None:
    attr = strawberry_adapter.plain_attribute(field)
    return None if attr is None else Plain(attr=attr, return_type=field.type)


_plain_by_schema: weakref.WeakKeyDictionary[GraphQLSchema, dict[GraphQLObjectType, dict[str, Plain]]] = (
    weakref.WeakKeyDictionary()
)


# Completions hold nothing of a request: one per shape, shared by every executor of the schema (a
# thousand subscriptions of one document hold one), bounded against clients sending endless shapes.
_SHARED_BOUND = 4096
_shared_by_schema: weakref.WeakKeyDictionary[GraphQLSchema, dict[tuple[Any, ...], Completion]] = (
    weakref.WeakKeyDictionary()
)


# Shared events' keys (operation node id, variables text), one object per distinct key.
_SHARED_KEYS: dict[tuple[int, str], tuple[int, str]] = {}


def _shared(schema: GraphQLSchema, key: tuple[Any, ...], make: Callable[[], Completion]) -> Completion:
    table = _shared_by_schema.get(schema)
    if table is None:
        table = _shared_by_schema[schema] = {}
    known = table.get(key)
    if known is None:
        if len(table) >= _SHARED_BOUND:
            table.clear()
        known = table[key] = make()
    return known


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


def _leaf(leaf: GraphQLLeafType, non_null: bool) -> Completion:
    coerce = leaf.coerce_output_value

    def complete(value: Any) -> Any:
        if value is None:
            if non_null:
                raise Abandon
            return None
        if type(value) not in _PLAIN_VALUES and not isinstance(value, enum.Enum):
            raise Abandon
        coerced = coerce(value)
        if coerced is None or coerced is Undefined:
            raise Abandon
        return coerced

    return complete


def _list(item: Completion, non_null: bool) -> Completion:
    def complete(value: Any) -> Any:
        if value is None:
            if non_null:
                raise Abandon
            return None
        if type(value) is not list and type(value) is not tuple:
            raise Abandon
        return [item(v) for v in value]

    return complete


Entry = tuple[str, str | None, Completion | None]  # response name, attribute, completion (None: __typename)


def _object(origin: type, typename: str, entries: list[Entry], non_null: bool) -> Completion:
    def complete(value: Any) -> Any:
        if value is None:
            if non_null:
                raise Abandon
            return None
        if type(value) is not origin:
            raise Abandon
        out: dict[str, Any] = {}
        for name, attr, sub in entries:
            out[name] = typename if sub is None else sub(getattr(value, attr))  # type: ignore[arg-type]
        return out

    return complete


class PlainFieldExecutor(strawberry_adapter.ExecutionContext):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        manager = self.middleware_manager
        # Field middleware (an extension with a `resolve` hook) must see every field.
        self._plain = {} if manager is not None and manager.middlewares else plain_fields(self.schema)
        if self.operation.operation is OperationType.MUTATION:
            # A mutation runs once: compiling its completions costs more than it saves (bench cycle).
            self._plain = {}
        # (return type, field group) -> completion or None; the group is kept alive with its entry,
        # as graphql-core does for its own memo, so its id is not reused while the entry exists.
        self._completions: dict[tuple[int, int], tuple[FieldDetailsList, Completion | None]] = {}
        # The same by the group's field nodes: a subscription's executor for each event collects new
        # groups from the same document, and compiles once per subscription instead of per event.
        self._by_nodes: dict[tuple[int, ...], tuple[FieldDetailsList, Completion | None]] = {}
        # Shared events (`backend/api/fanout.py`): a result to hand back instead of executing, where an
        # event's result is to be kept, and this operation's key once worked out.
        self._replay: ExecutionResult | None = None
        self._keep_in: tuple[dict[Any, Any], Any] | None = None
        self._shared_key_known = False
        self._shared_key_value: tuple[int, str] | None = None

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        running = ws_operations.RUNNING.get()
        if running is not None and running.executor is None:
            # The subscription's executor, for results sent directly (`backend/api/fanout.py`).
            running.executor = self
        results = SHARED.results_of(payload) if self._plain else None
        key = None
        if results is not None and (key := self._shared_key()) is not None:
            kept = results.get(key)
            if kept is not None and kept[0] is self.operation:
                # Executed already for another subscription of the same document and variables: this
                # executor hands that result back as its own (`execute_operation`), building nothing.
                self._replay = kept[1]
                return self
        executor = cast(PlainFieldExecutor, super().build_per_event_executor(payload))
        executor.start_event(None if results is None or key is None else (results, key))
        if results is None:
            # An event of this subscription alone (an ask's outcome) runs once too; only a result
            # shared by many subscriptions, or a query's long lists, repays compiling.
            executor._plain = {}
        return executor

    def start_event(self, keep_in: tuple[dict[Any, Any], Any] | None) -> None:
        """As the copy made for one subscription event: it shares the compiled completions, its own
        groups are forgotten with the event, and a result to be shared is kept in `keep_in`."""
        self._completions = {}
        self._keep_in = keep_in

    def _shared_key(self) -> tuple[int, str] | None:
        """What a shared event's result depends on besides the event: the operation (its document)
        and the values of its variables (`@include(if: $x)`, say); None when they cannot be told."""
        if not self._shared_key_known:
            try:
                variables = orjson.dumps(self.variable_values.coerced, option=orjson.OPT_SORT_KEYS)
            except TypeError:
                self._shared_key_value = None
            else:
                key = (id(self.operation), variables.decode())
                # One key object for all the subscriptions of one document and variables.
                if len(_SHARED_KEYS) >= _SHARED_BOUND:
                    _SHARED_KEYS.clear()
                self._shared_key_value = _SHARED_KEYS.setdefault(key, key)
            self._shared_key_known = True
        return self._shared_key_value

    def execute_operation(self, serially: bool | None = None) -> Any:
        replay = self._replay
        if replay is not None:
            self._replay = None
            return replay
        result = super().execute_operation(serially)
        if self._keep_in is not None and isinstance(result, ExecutionResult) and not result.errors:
            results, key = self._keep_in
            SHARED.keep(results, key, self.operation, result)
        return result

    def completion(
        self, return_type: GraphQLOutputType, field_details_list: FieldDetailsList
    ) -> Completion | None:
        key = (id(return_type), id(field_details_list))
        known = self._completions.get(key)
        if known is None:
            try:
                known = self._by_group_nodes(return_type, field_details_list)
            except Exception:  # noqa: BLE001 - e.g. collecting sub-fields: graphql-core raises it in place
                known = (field_details_list, None)
            self._completions[key] = known
        return known[1]

    def _by_group_nodes(
        self, return_type: GraphQLOutputType, field_details_list: FieldDetailsList
    ) -> tuple[FieldDetailsList, Completion | None]:
        if not self._plain or any(
            d.defer_usage is not None or d.fragment_variable_values is not None for d in field_details_list
        ):
            return (field_details_list, None)
        if is_leaf_type(return_type.of_type if isinstance(return_type, GraphQLNonNull) else return_type):
            return (field_details_list, self._compile(return_type, field_details_list))  # shared anyway
        nodes = (id(return_type), *(id(d.node) for d in field_details_list))
        known = self._by_nodes.get(nodes)
        if known is None:
            known = self._by_nodes[nodes] = (
                field_details_list,
                self._compile(return_type, field_details_list),
            )
        return known

    def _compile(
        self, return_type: GraphQLOutputType, field_details_list: FieldDetailsList
    ) -> Completion | None:
        for details in field_details_list:
            if details.defer_usage is not None or details.fragment_variable_values is not None:
                return None
            if any(d.name.value not in _COLLECTION_DIRECTIVES for d in details.node.directives or ()):
                return None
        non_null = isinstance(return_type, GraphQLNonNull)
        inner = return_type.of_type if isinstance(return_type, GraphQLNonNull) else return_type
        if is_leaf_type(inner):
            leaf = inner
            return _shared(self.schema, ("leaf", leaf, non_null), lambda: _leaf(leaf, non_null))
        if isinstance(inner, GraphQLList):
            item = self.completion(inner.of_type, field_details_list)
            if item is None:
                return None
            return _shared(self.schema, ("list", item, non_null), lambda: _list(item, non_null))
        if not is_object_type(inner):
            return None
        origin = strawberry_adapter.object_origin(inner)
        fields = self._plain.get(inner)
        if origin is None or fields is None:
            return None
        grouped, defer_usages, _ = self.collect_subfields(inner, field_details_list)
        if defer_usages:
            return None
        entries: list[Entry] = []
        for response_name, sub_details in grouped.items():
            node = sub_details[0].node
            if node.name.value == "__typename":
                entries.append((response_name, None, None))
                continue
            spec = fields.get(node.name.value)
            if spec is None or node.arguments:
                return None
            sub = self.completion(spec.return_type, sub_details)
            if sub is None:
                return None
            entries.append((response_name, spec.attr, sub))
        name = inner.name
        return _shared(
            self.schema,
            ("object", origin, name, tuple(entries), non_null),
            lambda: _object(origin, name, entries, non_null),
        )

    def complete_value(
        self,
        return_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: Any,
        path: Path,
        result: Any,
        position_context: Any,
    ) -> Any:
        # Values a resolver returned (a list of sessions, say), and graphql-core's own recursion.
        complete = self.completion(return_type, field_details_list)
        if complete is not None:
            try:
                return complete(result)
            except Exception:  # noqa: BLE001 - not plain after all: graphql-core's path from the start
                pass
        return super().complete_value(return_type, field_details_list, info, path, result, position_context)

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> Any:
        """graphql-core's loop, except that a plain field is read and completed in place."""
        fields = self._plain.get(parent_type)
        if fields is None:
            return super().execute_fields(
                parent_type, source_value, path, grouped_field_set, position_context
            )
        results: dict[str, Any] = {}
        is_awaitable = self.is_awaitable
        awaitable_fields: list[str] = []
        try:
            for response_name, field_details_list in grouped_field_set.items():
                node = field_details_list[0].node
                spec = fields.get(node.name.value)
                if spec is not None and not node.arguments:
                    complete = self.completion(spec.return_type, field_details_list)
                    if complete is not None:
                        try:
                            results[response_name] = complete(getattr(source_value, spec.attr))
                            continue
                        except Exception:  # noqa: BLE001 - graphql-core's path from the start
                            pass
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
