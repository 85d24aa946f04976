"""The Strawberry schema: one Query, Mutation and Subscription composed from the feature modules."""

from __future__ import annotations

import datetime as dt
from functools import partial

import strawberry
from strawberry.schema.config import StrawberryConfig
from strawberry.extensions import MaxTokensLimiter, QueryDepthLimiter

from backend.api.errors import ErrorPolicy
from backend.api.operations import OperationMutations, OperationQueries
from backend.api.scalars import DateTime


@strawberry.type
class Query(OperationQueries):
    pass


@strawberry.type
class Mutation(OperationMutations):
    pass


def build_schema(*, max_depth: int = 12, max_tokens: int = 5000) -> strawberry.Schema:
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        config=StrawberryConfig(scalar_map={dt.datetime: DateTime}),
        # Factories, not instances: each operation gets its own extension state.
        extensions=[
            ErrorPolicy,
            partial(QueryDepthLimiter, max_depth=max_depth),
            partial(MaxTokensLimiter, max_token_count=max_tokens),
        ],
    )


def export_sdl() -> str:
    return build_schema().as_str() + "\n"
