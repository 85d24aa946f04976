"""Document size limit: an oversized query is refused before validation, on HTTP and WebSocket alike."""

from __future__ import annotations

from typing import Any

from graphql import DocumentNode, GraphQLError, ValidationRule


def max_query_bytes(limit: int) -> type[ValidationRule]:
    """A validation rule refusing a document longer than `limit` bytes (UTF-8)."""

    class MaxQueryBytes(ValidationRule):
        def enter_document(self, node: DocumentNode, *_: Any) -> None:
            body = node.loc.source.body if node.loc is not None else ""
            size = len(body.encode())
            if size > limit:
                self.report_error(
                    GraphQLError(
                        f"query document is {size} bytes; the limit is {limit}",
                        extensions={"code": "QUERY_TOO_LARGE"},
                    )
                )

    return MaxQueryBytes
