"""The Strawberry schema: one Query, Mutation and Subscription composed from the feature modules."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from functools import partial

import strawberry
from graphql import GraphQLError, ValidationRule
from strawberry.extensions import (
    AddValidationRules,
    MaxTokensLimiter,
    ParserCache,
    SchemaExtension,
    ValidationCache,
)
from strawberry.extensions.query_depth_limiter import create_validator
from strawberry.schema.config import StrawberryConfig

from backend.api.admin import AccessMutations, AccessQueries
from backend.api.agents import AgentMutations, AgentSubscriptions
from backend.api.clarifications import (
    ClarificationMutations,
    ClarificationQueries,
    ClarificationSubscriptions,
)
from backend.api.errors import ErrorPolicy
from backend.api.execution import PlainFieldExecutor
from backend.api.hygiene import TextHygiene
from backend.api.limits import max_query_bytes
from backend.api.live import LiveSubscriptions
from backend.api.observe import OperationMetrics
from backend.api.operations import OperationMutations, OperationQueries
from backend.api.scalars import DateTime


@strawberry.type
class Query(OperationQueries, AccessQueries, ClarificationQueries):
    pass


@strawberry.type
class Mutation(OperationMutations, AgentMutations, AccessMutations, ClarificationMutations):
    pass


@strawberry.type
class Subscription(AgentSubscriptions, LiveSubscriptions, ClarificationSubscriptions):
    pass


class DocumentCache(ParserCache):
    """Strawberry's parser cache, except that a document that does not parse is left to Strawberry's
    own parse step, which reports the syntax error as a pre-execution error (with its code) instead
    of letting it escape the extension hooks."""

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query:
            try:
                context.graphql_document = self.cached_parse_document(context.query, **context.parse_options)
            except GraphQLError:
                context.graphql_document = None
        yield


def _rules(*rules: type[ValidationRule]) -> type[SchemaExtension]:
    """Validation rules as an extension factory whose rule classes are built once per schema, so the
    validation cache (keyed by document and rules) hits for every repeated document."""

    class Rules(AddValidationRules):
        def __init__(self) -> None:
            super().__init__(list(rules))

    return Rules


def build_schema(
    *, max_depth: int = 12, max_tokens: int = 5000, max_bytes: int = 64_000
) -> strawberry.Schema:
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map={dt.datetime: DateTime}),
        # Plain attribute fields are read directly instead of through a resolver call each.
        execution_context_class=PlainFieldExecutor,
        # Factories, not instances: each operation gets its own extension state. Parsed documents and
        # their validation results are cached (bounded LRU, 128 documents each); the cache runs before
        # TextHygiene, whose per-request variable check may still refuse the operation.
        extensions=[
            ErrorPolicy,
            partial(MaxTokensLimiter, max_token_count=max_tokens),
            _rules(create_validator(max_depth, None)),
            max_query_bytes(max_bytes),
            DocumentCache,
            ValidationCache,
            TextHygiene,
            OperationMetrics,
        ],
    )


def export_sdl() -> str:
    return build_schema().as_str() + "\n"
