"""The Strawberry schema: one Query, Mutation and Subscription composed from the feature modules."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.extensions.runner import SchemaExtensionsRunner
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext

from backend.api import graphql_core_adapter, strawberry_adapter
from backend.api.admin import AccessMutations, AccessQueries
from backend.api.agents import AgentMutations, AgentSubscriptions
from backend.api.clarifications import (
    ClarificationMutations,
    ClarificationQueries,
    ClarificationSubscriptions,
)
from backend.api.decisions import DecisionQueries
from backend.api.errors import document_error_code, is_expected
from backend.api.live import LiveSubscriptions
from backend.api.needs_you import NeedsYouQueries, NeedsYouSubscriptions
from backend.api.operations import OperationMutations, OperationQueries
from backend.api.permission_rules import PermissionRuleMutations, PermissionRuleQueries
from backend.api.permissions import PermissionMutations, PermissionQueries, PermissionSubscriptions
from backend.api.policy import operation_policy
from backend.api.reach import ReachMutations, ReachQueries
from backend.api.runners import RunnerMutations, RunnerSubscriptions
from backend.api.scalars import DateTime
from backend.domain.errors import TurnwiseError

log = logging.getLogger("turnwise.api")


@strawberry.type
class Query(
    OperationQueries,
    AccessQueries,
    ClarificationQueries,
    PermissionQueries,
    PermissionRuleQueries,
    ReachQueries,
    NeedsYouQueries,
    DecisionQueries,
):
    pass


@strawberry.type
class Mutation(
    OperationMutations,
    AgentMutations,
    AccessMutations,
    ClarificationMutations,
    PermissionMutations,
    PermissionRuleMutations,
    ReachMutations,
    RunnerMutations,
):
    pass


@strawberry.type
class Subscription(
    AgentSubscriptions,
    LiveSubscriptions,
    ClarificationSubscriptions,
    PermissionSubscriptions,
    NeedsYouSubscriptions,
    RunnerSubscriptions,
):
    pass


# One request can hold many errors (a document of unknown fields, say): past these, one line counts
# the rest, and a long message or operation name is cut, so a client cannot fill the log by itself.
LOGGED_ERRORS = 10
LOGGED_TEXT = 300


def _short(text: str) -> str:
    return text if len(text) <= LOGGED_TEXT else f"{text[:LOGGED_TEXT]}..."


def _code(error: GraphQLError) -> str:
    """The code the client is told (the same rule as `ErrorPolicy.anonymise_error`)."""
    original = error.original_error
    if isinstance(original, TurnwiseError):
        return original.code
    code = (error.extensions or {}).get("code")
    return code if isinstance(code, str) else document_error_code(error)


class TurnwiseSchema(strawberry.Schema):
    """Strawberry's schema with our log of an operation's errors.

    Strawberry's `Schema.process_errors` logs every error at ERROR with its traceback, so a wrong id
    or a typo in a query looked like a defect, several lines each. Here an expected error (a
    `TurnwiseError`, a parse or validation error: what `ErrorPolicy` shows the client as it is) is one
    INFO line without a traceback. An unexpected one is not logged here: `ErrorPolicy` logs it once,
    with its traceback and the id the client is told.
    """

    def __init__(self, *args: Any, runner: type[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The adapter's extensions runner (None: Strawberry's own) and the hook plans it keeps.
        self._turnwise_runner = runner
        self._hook_plans: dict[Any, Any] = {}

    def create_extensions_runner(
        self, execution_context: ExecutionContext, extensions: list[SchemaExtension]
    ) -> SchemaExtensionsRunner:
        if self._turnwise_runner is None:
            return super().create_extensions_runner(execution_context, extensions)
        made = self._turnwise_runner(execution_context, extensions, self._hook_plans)
        runner: SchemaExtensionsRunner = made
        return runner

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        expected = [e for e in errors if is_expected(e)]
        if not expected:
            return
        operation = None if execution_context is None else execution_context.operation_name
        named = {} if operation is None else {"operation": _short(operation)}
        for error in expected[:LOGGED_ERRORS]:
            where = {} if not error.path else {"path": ".".join(str(p) for p in error.path)}
            log.info(
                "client error",
                extra={
                    "event": "graphql.client_error",
                    **named,
                    "code": _code(error),
                    **where,
                    "error": _short(error.message),
                },
            )
        if len(expected) > LOGGED_ERRORS:
            log.info(
                "client errors not logged",
                extra={
                    "event": "graphql.client_errors_omitted",
                    **named,
                    "count": len(expected) - LOGGED_ERRORS,
                },
            )


def build_schema(
    *,
    max_depth: int = 12,
    max_tokens: int = 5000,
    max_bytes: int = 64_000,
    adapter: bool = True,
    plain_fields: bool = True,
) -> strawberry.Schema:
    """`adapter`: whether the schema may enter extension hooks through the Strawberry adapter's runner
    (`backend/api/strawberry_adapter.py`; also off with `TURNWISE_WS_ADAPTER=0`); `plain_fields`:
    whether it may execute with the plain-field executor (`backend/api/graphql_core_adapter.py`; also
    off with either adapter's switch)."""
    return TurnwiseSchema(
        runner=strawberry_adapter.extensions_runner() if adapter else None,
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map={dt.datetime: DateTime}),
        # Plain attribute fields are read directly instead of through a resolver call each.
        execution_context_class=graphql_core_adapter.executor_class(adapter and plain_fields),
        # A factory: each operation gets its own extension state (see `backend/api/policy.py`).
        extensions=[operation_policy(max_depth=max_depth, max_tokens=max_tokens, max_bytes=max_bytes)],
    )


def export_sdl() -> str:
    return build_schema().as_str() + "\n"
