"""Operation latency for `/metrics`: executed queries and mutations by root field."""

from __future__ import annotations

import time
from collections.abc import Iterator

from graphql import FieldNode, OperationDefinitionNode
from strawberry.extensions import SchemaExtension
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


class OperationMetrics(SchemaExtension):
    def on_execute(self) -> Iterator[None]:
        ctx = self.execution_context
        started = time.perf_counter()
        yield
        kind = ctx.operation_type
        if kind is OperationType.SUBSCRIPTION:
            return  # a subscription's lifetime is not a latency
        OPERATIONS.labels(kind.value, root_field(ctx.graphql_document, ctx.operation_name)).observe(
            time.perf_counter() - started
        )
