"""Maps errors to GraphQL in one place: expected ones keep their message and a code, the rest are
logged with an id and returned without internals."""

from __future__ import annotations

import logging
import uuid

from graphql.error import GraphQLError
from strawberry.extensions import MaskErrors

from backend.api import strawberry_adapter
from backend.db.health import is_outage
from backend.domain.errors import TurnwiseError, Unavailable

log = logging.getLogger("turnwise.api")


def is_expected(error: GraphQLError) -> bool:
    original = error.original_error
    # No original error: parse/validation errors, which are safe and useful to show.
    return original is None or isinstance(original, TurnwiseError | GraphQLError)


def document_error_code(error: GraphQLError) -> str:
    """Every error carries a code, also the ones graphql-core raises before any resolver runs."""
    if error.message.startswith("Syntax Error"):
        return "GRAPHQL_PARSE_FAILED"
    if error.message.startswith("Variable '$"):
        return "BAD_USER_INPUT"
    return "GRAPHQL_VALIDATION_FAILED"


def _always(_: GraphQLError) -> bool:
    return True


# Strawberry's check of a result costs more than the rest of the policy on an operation without errors
# (`strawberry_adapter.lean_error_results`).
@strawberry_adapter.lean_error_results
class ErrorPolicy(MaskErrors):
    def __init__(self) -> None:
        super().__init__(should_mask_error=_always, error_message="Internal error")

    def anonymise_error(self, error: GraphQLError) -> GraphQLError:
        original = error.original_error
        if original is not None and not isinstance(original, TurnwiseError) and is_outage(original):
            # Not a defect: the database is gone for now. Typed, retryable, one line in the log.
            log.warning(
                "database unavailable at %s",
                error.path,
                extra={"event": "api.unavailable", "error": type(original).__name__},
            )
            original = Unavailable()
            return GraphQLError(
                message=str(original),
                nodes=error.nodes,
                source=error.source,
                positions=error.positions,
                path=error.path,
                original_error=None,
                extensions={"code": original.code, "retryable": True},
            )
        if is_expected(error):
            extensions = dict(error.extensions or {})
            if isinstance(original, TurnwiseError):
                extensions["code"] = original.code
            extensions.setdefault("code", document_error_code(error))
            return GraphQLError(
                message=error.message,
                nodes=error.nodes,
                source=error.source,
                positions=error.positions,
                path=error.path,
                original_error=None,
                extensions=extensions or None,
            )
        error_id = uuid.uuid4().hex[:12]
        log.error(
            "unexpected error %s at %s", error_id, error.path, exc_info=original, extra={"error_id": error_id}
        )
        return GraphQLError(
            message=f"Internal error (id {error_id})",
            nodes=error.nodes,
            source=error.source,
            positions=error.positions,
            path=error.path,
            original_error=None,
            extensions={"code": "INTERNAL", "errorId": error_id},
        )
