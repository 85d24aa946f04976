"""The Strawberry schema: one Query, Mutation and Subscription composed from the feature modules."""

from __future__ import annotations

import datetime as dt

import strawberry
from strawberry.schema.config import StrawberryConfig

from backend.api.admin import AccessMutations, AccessQueries
from backend.api.agents import AgentMutations, AgentSubscriptions
from backend.api.clarifications import (
    ClarificationMutations,
    ClarificationQueries,
    ClarificationSubscriptions,
)
from backend.api.execution import PlainFieldExecutor
from backend.api.live import LiveSubscriptions
from backend.api.operations import OperationMutations, OperationQueries
from backend.api.policy import operation_policy
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
        # A factory: each operation gets its own extension state (see `backend/api/policy.py`).
        extensions=[operation_policy(max_depth=max_depth, max_tokens=max_tokens, max_bytes=max_bytes)],
    )


def export_sdl() -> str:
    return build_schema().as_str() + "\n"
