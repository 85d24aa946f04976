"""Operation latency for `/metrics`: executed queries and mutations by root field."""

from __future__ import annotations

from graphql import FieldNode, OperationDefinitionNode
from strawberry.types import ExecutionContext
from strawberry.types.graphql import OperationType

from backend.metrics import OPERATIONS


def root_field(document: object, operation_name: str | None) -> str:
    """The first root field of the operation that ran (documents here are already validated)."""
    for definition in getattr(document, "definitions", ()):
        if not isinstance(definition, OperationDefinitionNode):
            continue
        if operation_name is not None and (
            definition.name is None or definition.name.value != operation_name
        ):
            continue
        for selection in definition.selection_set.selections:
            if isinstance(selection, FieldNode):
                return selection.name.value
    return "other"


def record_operation(ctx: ExecutionContext, seconds: float) -> None:
    """The latency of an executed query or mutation (a subscription's lifetime is not a latency)."""
    kind = ctx.operation_type
    if kind is OperationType.SUBSCRIPTION:
        return
    OPERATIONS.labels(kind.value, root_field(ctx.graphql_document, ctx.operation_name)).observe(seconds)
