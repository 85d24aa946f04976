"""Every undocumented name of Strawberry that the API relies on: here, and nowhere else.

Checked against (`CHECKED`): strawberry-graphql 0.341.2. The canary (`tests/api/test_strawberry_adapter.py`)
checks that each name of `RELIED_ON` still exists with the shape used here, exercises it over a real
WebSocket, and fails while the installed version differs from `CHECKED`, naming what to re-check.
`TURNWISE_WS_ADAPTER=0` (`Settings.ws_adapter`) turns all of it off: the view then uses Strawberry's
own handler, unchanged, and the API parses documents through an `lru_cache` of its own. The parser
is chosen when `backend/api/policy.py` is imported, before any `Settings` exist, so `parse_cache`
reads the variable itself, as `Settings.from_env` does (a `Settings(ws_adapter=False)` made in code
turns off the handler only).

What it is for: a graphql-transport-ws connection waits for `connection_init` with a timer task
(`connection_init_wait_timeout`), which the handler cancels when the message comes and keeps for as
long as the connection lasts. A cancelled task keeps the CancelledError it ended with, and the
error's traceback keeps the frames of the wait (the sleep's future and timer handle with them): about
1.2 KB a connection, for hours, on a process holding ten thousand idle phones and tabs. The handler
here reads that error back once the task has ended, which drops it (what `Task.result()` does with a
cancelled task's error), and everything it kept goes with it. Nothing else changes: the timeout, the
acknowledgement and every message are Strawberry's.

And the parse cache (`parse_cache`): the API parses each operation's document itself, from a bounded
cache of `graphql.parse` (`backend/api/policy.py`). With the adapter on that cache is Strawberry's
own, the one its `ParserCache` extensions of the same size share, so a process running both parses
a text once; off, or should the name be gone or no longer be an `lru_cache` around `graphql.parse`,
it is a `functools.lru_cache` of the API's own, which parses to the same documents.

And validation (`document_validator`): the API validates each operation's document itself, behind a
bounded cache of results (`backend/api/policy.py`), with the function Strawberry's own validation
step calls (graphql-core's `validate` with Strawberry's extra rules for `Maybe` and `@oneOf` inputs).
Off, or should the name be gone, there is no validator here: the API then caches nothing and leaves
every document to Strawberry's own validation step, which gives the same errors, only not cached.

The names, and why there is no public way:

- `AsyncBaseHTTPView.graphql_transport_ws_handler_class` (undocumented, not underscored): the class
  of the handler a view runs per graphql-transport-ws connection. No documented hook is called with
  the handler or its timer task.
- `BaseGraphQLTransportWSHandler.handle_connection_init(self, message)` (undocumented, not
  underscored): where the timer task is cancelled; extended, never replaced.
- `BaseGraphQLTransportWSHandler.connection_init_timeout_task` (undocumented instance attribute):
  the timer task.
- `strawberry.extensions.parser_cache._get_parse_cache(maxsize)` (private): Strawberry's shared
  parse cache, `functools.lru_cache(maxsize)` around `graphql.parse`, one per `maxsize`. The only
  public way to it is the `ParserCache` extension, which parses in its own `on_parse` hook (a context
  manager of its own per operation, which `policy.py` exists to avoid) and gives no access to it.
- `strawberry.schema.schema.validate_document(schema, document, validation_rules)` (undocumented,
  not underscored): validation as Strawberry runs it. The public way is Strawberry's own validation
  step, which runs it on every operation and keeps no result between operations.
- `strawberry.Schema._schema` (private instance attribute): the graphql-core schema that
  `validate_document` takes. Strawberry's validation step reads it the same way.
- `strawberry.extensions.runner.SchemaExtensionsRunner` (undocumented class) and
  `Schema.create_extensions_runner(self, execution_context, extensions)` (undocumented, not
  underscored): the object through which Strawberry enters each extension hook of each stage of an
  operation (`operation()`, `parsing()`, `validation()`, `executing()`, `on_stream_result(result)`,
  `get_extensions_results(ctx)`). Extension hooks themselves are public; how they are entered is not.

- `BaseGraphQLTransportWSHandler.run_operation(self, operation)` (undocumented, not underscored): the
  coroutine each graphql-transport-ws operation's own task runs; extended (it records the operation
  in a context variable for that task), never replaced. `handler.operations` (instance attribute:
  the connection's operations by id), and of Strawberry's `Operation`: `id`, `handler`, `completed`
  (instance attributes) and `send_operation_message(self, message)` (coroutine), through which
  Strawberry's own `Operation.send_next` sends every `next` message. There is no public way to send
  an operation's result other than yielding it from the subscription, which is what costs a third of
  a fan-out's CPU (`backend/api/fanout.py`, `direct_sender`).

And the direct sends (`send_next_data`): a change reaching an idle `pendingActionChanged`
subscription is sent without waking it (`backend/api/fanout.py`). The sender needs the operation the
subscription's task runs, which the handler records when it runs it (`running_operation`, in
`backend/api/ws_operations.py` with the rest of what the handler keeps that is ours), and sends the
`next` message `Operation.send_next` sends for a result without errors or extensions, through the
same `send_operation_message` (which keeps the operation's `completed` check). Only for a schema
whose extensions need not see each result (`results_sendable_directly`: none has results of its own
or a hook for each streamed result other than `MaskErrors`', which only masks errors, and only
results without errors are sent this way).

And the hooks (`LeanExtensionsRunner`): Strawberry enters every stage of every operation, and every
result a subscription sends, through a context manager that looks each extension's hook up again
(a fifth of the process's CPU for one change fanned out to ten thousand subscriptions). The runner
here is Strawberry's with each stage entered through hooks looked up once per schema and set of
extension classes (`backend/api/extension_hooks.py`, public names only): the same hooks in the same
order with the same arguments; a hook it cannot enter so is left to Strawberry's own manager.

And the error policy's result check (`lean_error_results`): Strawberry's `MaskErrors` tests each
operation's result, and each streamed result, against a runtime-checkable Protocol before it looks
at its errors, which cost a fifth of a small operation (about 9 us of 45 us for `{ __typename }`);
`ErrorPolicy` (`backend/api/errors.py`) reads the result's `errors` instead, which does the same.
Off, `MaskErrors`' own check runs. The names: `MaskErrors._process_result(self, result)` (private),
replaced, and `MaskErrors._process_errors(self, errors)` (private), called as the original does.
`MaskErrors.anonymise_error(self, error)` (undocumented, not underscored), which `ErrorPolicy`
overrides to give each error its code, is relied on whatever the switch: the documented options
(`should_mask_error`, `error_message`) give every masked error one message.

And the plain-field executor's reading of the schema (`plain_attribute`, `object_origin`,
`ExecutionContext`; the executor is `backend/api/graphql_core_adapter.py`, off with this switch or
its own): Strawberry's graphql-core executor class `StrawberryGraphQLCoreExecutionContext`
(undocumented), which the executor extends; a graphql-core type's or field's Strawberry definition
under `GraphQLCoreConverter.DEFINITION_BACKREF` in its `extensions` (undocumented);
`strawberry.resolvers.is_default_resolver(func)` (undocumented: Strawberry's own test for a field it
resolves by reading an attribute); of a `StrawberryField`, `is_basic_field`, `default_resolver` and
`python_name`; of a `StrawberryObjectDefinition`, `origin`. There is no public way to tell, from a
schema, which fields only read an attribute.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from graphql import (
    ASTValidationRule,
    DocumentNode,
    GraphQLError,
    GraphQLField,
    GraphQLObjectType,
    GraphQLSchema,
    parse,
)
from strawberry.resolvers import is_default_resolver
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.base import StrawberryObjectDefinition
from strawberry.types.field import StrawberryField

from backend.api.extension_hooks import HookPlan, StagePlans
from backend.api.ws_operations import (
    RUNNING,
    RunningOperation,
    drop_cancellation,
    results_sendable_directly,
)
from backend.config import env_switch

# The library versions the names below were read and checked against.
CHECKED = {"strawberry-graphql": "0.341.2"}


@dataclass(frozen=True, slots=True)
class Reliance:
    """One name relied on: `owner` ("module:Class", or "module" for a module's own name), the
    attribute, what it must be (`coroutine`, `function`: called, not awaited, `attribute`, `instance
    attribute`: assigned by the class's `__init__`, `dataclass field`), and for a coroutine or function
    the leading parameter names."""

    library: str
    owner: str
    name: str
    kind: str
    parameters: tuple[str, ...] = ()


_RUNNER = "strawberry.extensions.runner:SchemaExtensionsRunner"
_OPERATION = "strawberry.subscriptions.protocols.graphql_transport_ws.handlers:Operation"
_HANDLERS = "strawberry.subscriptions.protocols.graphql_transport_ws.handlers:BaseGraphQLTransportWSHandler"
_PARSER_CACHE = "strawberry.extensions.parser_cache"
_SCHEMA = "strawberry.schema.schema"
_FIELD = "strawberry.types.field:StrawberryField"
_MASK_ERRORS = "strawberry.extensions:MaskErrors"

RELIED_ON: tuple[Reliance, ...] = (
    Reliance(
        "strawberry-graphql",
        "strawberry.http.async_base_view:AsyncBaseHTTPView",
        "graphql_transport_ws_handler_class",
        "attribute",
    ),
    Reliance("strawberry-graphql", _HANDLERS, "handle_connection_init", "coroutine", ("self", "message")),
    Reliance("strawberry-graphql", _HANDLERS, "connection_init_timeout_task", "instance attribute"),
    Reliance("strawberry-graphql", _PARSER_CACHE, "_get_parse_cache", "function", ("maxsize",)),
    Reliance(
        "strawberry-graphql",
        _SCHEMA,
        "validate_document",
        "function",
        ("schema", "document", "validation_rules"),
    ),
    Reliance("strawberry-graphql", f"{_SCHEMA}:Schema", "_schema", "instance attribute"),
    Reliance(
        "strawberry-graphql",
        f"{_SCHEMA}:Schema",
        "create_extensions_runner",
        "function",
        ("self", "execution_context", "extensions"),
    ),
    Reliance("strawberry-graphql", _RUNNER, "operation", "function", ("self",)),
    Reliance("strawberry-graphql", _RUNNER, "parsing", "function", ("self",)),
    Reliance("strawberry-graphql", _RUNNER, "validation", "function", ("self",)),
    Reliance("strawberry-graphql", _RUNNER, "executing", "function", ("self",)),
    Reliance("strawberry-graphql", _RUNNER, "on_stream_result", "function", ("self", "result")),
    Reliance("strawberry-graphql", _RUNNER, "get_extensions_results", "coroutine", ("self", "ctx")),
    Reliance("strawberry-graphql", _RUNNER, "extensions", "instance attribute"),
    Reliance("strawberry-graphql", _HANDLERS, "run_operation", "coroutine", ("self", "operation")),
    Reliance("strawberry-graphql", _HANDLERS, "operations", "instance attribute"),
    Reliance("strawberry-graphql", _OPERATION, "send_operation_message", "coroutine", ("self", "message")),
    Reliance("strawberry-graphql", _OPERATION, "id", "instance attribute"),
    Reliance("strawberry-graphql", _OPERATION, "handler", "instance attribute"),
    Reliance("strawberry-graphql", _OPERATION, "completed", "instance attribute"),
    Reliance("strawberry-graphql", _MASK_ERRORS, "_process_result", "function", ("self", "result")),
    Reliance("strawberry-graphql", _MASK_ERRORS, "_process_errors", "function", ("self", "errors")),
    Reliance("strawberry-graphql", _MASK_ERRORS, "anonymise_error", "function", ("self", "error")),
    Reliance("strawberry-graphql", _SCHEMA, "StrawberryGraphQLCoreExecutionContext", "attribute"),
    Reliance(
        "strawberry-graphql",
        "strawberry.schema.schema_converter:GraphQLCoreConverter",
        "DEFINITION_BACKREF",
        "attribute",
    ),
    Reliance("strawberry-graphql", "strawberry.resolvers", "is_default_resolver", "function", ("func",)),
    Reliance("strawberry-graphql", _FIELD, "is_basic_field", "attribute"),
    Reliance("strawberry-graphql", _FIELD, "default_resolver", "attribute"),
    Reliance("strawberry-graphql", _FIELD, "python_name", "attribute"),
    Reliance(
        "strawberry-graphql", "strawberry.types.base:StrawberryObjectDefinition", "origin", "dataclass field"
    ),
)


def installed_versions() -> dict[str, str]:
    return {name: version(name) for name in CHECKED}


async def send_next_data(running: RunningOperation, data: Any) -> bool:
    """Send `data` as the operation's next result, the message Strawberry's `Operation.send_next` sends
    for a result without errors or extensions (through the same `send_operation_message`); False,
    having sent nothing, once the operation is no longer the connection's."""
    operation = running.operation
    if operation.completed or operation.handler.operations.get(operation.id) is not operation:
        return False
    await operation.send_operation_message({"id": operation.id, "type": "next", "payload": {"data": data}})
    return True


def transport_ws_handler(base: type[Any], *, direct: bool = False) -> type[Any]:
    """`base` (a view's graphql-transport-ws handler class), whose connections do not keep their
    cancelled `connection_init` timer for as long as they last; with `direct`, each operation's task
    knows its operation (`ws_operations.running_operation`)."""

    class ReleasingInitTimer(base):  # type: ignore[misc]
        async def handle_connection_init(self, message: Any) -> None:
            await super().handle_connection_init(message)
            timer = self.connection_init_timeout_task
            if isinstance(timer, asyncio.Task):
                timer.add_done_callback(drop_cancellation)

        if direct:

            async def run_operation(self, operation: Any) -> None:
                # The operation's task runs this (and only this) coroutine: the value is its own.
                token = RUNNING.set(RunningOperation(operation))
                try:
                    await super().run_operation(operation)
                finally:
                    RUNNING.reset(token)

    ReleasingInitTimer.__name__ = ReleasingInitTimer.__qualname__ = f"ReleasingInitTimer{base.__name__}"
    return ReleasingInitTimer


def use_in(view: Any) -> None:
    """Make `view` (a Strawberry view) run its graphql-transport-ws connections with the handler above
    (results sent directly where the view's schema allows it: `results_sendable_directly`)."""
    view.graphql_transport_ws_handler_class = transport_ws_handler(
        view.graphql_transport_ws_handler_class, direct=results_sendable_directly(view.schema)
    )


# `graphql.parse` behind a cache: the same arguments, the same document for the same text.
Parse = Callable[..., DocumentNode]


def switched_on() -> bool:
    """TURNWISE_WS_ADAPTER, read as `Settings.from_env` reads it (on unless "0", "false" or "no")."""
    return env_switch("TURNWISE_WS_ADAPTER")


def _strawberry_parse_cache(maxsize: int | None) -> Parse | None:
    """Strawberry's shared parse cache of `maxsize`, or None where it is gone or no longer an
    `lru_cache` around `graphql.parse`."""
    try:
        cached = importlib.import_module(_PARSER_CACHE)._get_parse_cache(maxsize)
    except (ImportError, AttributeError, TypeError):
        return None
    if getattr(cached, "__wrapped__", None) is not parse or not hasattr(cached, "cache_info"):
        return None
    return cached  # type: ignore[no-any-return]


@functools.cache
def _own_parse_cache(maxsize: int | None) -> Parse:
    return functools.lru_cache(maxsize=maxsize)(parse)


def parse_cache(maxsize: int | None) -> Parse:
    """`graphql.parse` (same arguments) behind a cache of `maxsize` documents, one per `maxsize`:
    Strawberry's own while the adapter is on (`switched_on`, read now), else one of the API's own."""
    if switched_on():
        cached = _strawberry_parse_cache(maxsize)
        if cached is not None:
            return cached
    return _own_parse_cache(maxsize)


# Validation as Strawberry's own validation step runs it: (graphql-core schema, document, rules) ->
# errors; and the graphql-core schema of a Strawberry schema.
Validate = Callable[[GraphQLSchema, DocumentNode, tuple[type[ASTValidationRule], ...]], list[GraphQLError]]


def core_schema(schema: Any) -> GraphQLSchema:
    """The graphql-core schema that Strawberry's `schema` (a `strawberry.Schema`) executes."""
    return schema._schema  # type: ignore[no-any-return]


def document_validator() -> Validate | None:
    """Strawberry's `validate_document` while the adapter is on (`switched_on`, read now) and the name
    is there; else None: validation is then left to Strawberry's own step."""
    if not switched_on():
        return None
    try:
        found = importlib.import_module(_SCHEMA).validate_document
    except (ImportError, AttributeError):
        return None
    return found if callable(found) else None


# --- extension hooks, looked up once (see the module's docstring) ---------------------------------


def extensions_runner() -> type[Any] | None:
    """`LeanExtensionsRunner` while the adapter is on (`switched_on`, read now) and Strawberry's runner
    is where it was; else None: the schema then uses Strawberry's own runner."""
    if not switched_on():
        return None
    try:
        base = getattr(importlib.import_module(_RUNNER.partition(":")[0]), _RUNNER.partition(":")[2])
    except (ImportError, AttributeError):
        return None
    return _lean_runner(base)


@functools.cache
def _lean_runner(base: type[Any]) -> type[Any]:
    class LeanExtensionsRunner(base):  # type: ignore[misc]
        """Strawberry's runner whose stages enter the hooks planned once per set of extension
        classes (`plans`, the schema's own dict); what each stage enters is what Strawberry's would."""

        def __init__(self, execution_context: Any, extensions: Any, plans: dict[Any, HookPlan]) -> None:
            super().__init__(execution_context=execution_context, extensions=extensions)
            self._stages = StagePlans(plans, self.extensions)

        def operation(self) -> Any:
            return self._stages.stage("on_operation", self.extensions) or super().operation()

        def parsing(self) -> Any:
            return self._stages.stage("on_parse", self.extensions) or super().parsing()

        def validation(self) -> Any:
            return self._stages.stage("on_validate", self.extensions) or super().validation()

        def executing(self) -> Any:
            return self._stages.stage("on_execute", self.extensions) or super().executing()

        def on_stream_result(self, result: Any) -> Any:
            stage = self._stages.stage("on_stream_result", self.extensions, result)
            return stage or super().on_stream_result(result)

        async def get_extensions_results(self, ctx: Any) -> dict[str, Any]:
            if self._stages.results_of_their_own():
                return await super().get_extensions_results(ctx)  # type: ignore[no-any-return]
            # No extension has results of its own (each would give an empty dict).
            data: dict[str, Any] = {}
            data.update(ctx.extensions_results)
            return data

    return LeanExtensionsRunner


# --- the error policy's result check (see the module's docstring) ---------------------------------


def _process_result_by_attribute(self: Any, result: object) -> None:
    errors = getattr(result, "errors", None)
    if errors:
        result.errors = self._process_errors(errors)  # type: ignore[attr-defined]


def lean_error_results(cls: type[Any]) -> type[Any]:
    """`cls` (a `MaskErrors`) reading a result's errors by attribute, while the adapter is on
    (`switched_on`, read when the class is made, as for `parse_cache`); else `cls` unchanged."""
    if switched_on() and getattr(cls, "_process_result", None) is not None:
        cls._process_result = _process_result_by_attribute
    return cls


# --- the plain-field executor's reading of the schema (see the module's docstring) ----------------

# The graphql-core executor Strawberry runs operations with; `graphql_core_adapter.PlainFieldExecutor`
# extends it.
ExecutionContext = StrawberryGraphQLCoreExecutionContext


def plain_attribute(field: GraphQLField) -> str | None:
    """The attribute of its source that `field` returns as it is (Strawberry's default resolver, no
    arguments, permissions or extensions), or None."""
    definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if not isinstance(definition, StrawberryField) or field.args or field.resolve is None:
        return None
    if not is_default_resolver(field.resolve) or not definition.is_basic_field:
        return None
    if definition.default_resolver is not getattr or not definition.python_name:
        return None
    return definition.python_name


def object_origin(object_type: GraphQLObjectType) -> type | None:
    """The Python class of a Strawberry object type without an `is_type_of` check, else None."""
    definition = (object_type.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if object_type.is_type_of is not None or not isinstance(definition, StrawberryObjectDefinition):
        return None
    return definition.origin
