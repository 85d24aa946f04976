"""Error types for expected outcomes; the API maps each to a GraphQL result or error in one place."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


class TurnwiseError(Exception):
    """Base of every error whose message is safe to show a client."""

    code = "TURNWISE_ERROR"


class NotFound(TurnwiseError):
    code = "NOT_FOUND"

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident!r} not found")
        self.what = what
        self.ident = ident


class InvalidInput(TurnwiseError):
    code = "BAD_USER_INPUT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class InvalidState(TurnwiseError):
    """The request is well formed but the current state forbids it (e.g. a message on a terminal session)."""

    code = "INVALID_STATE"


class StaleGeneration(InvalidState):
    """A ready event (completeTurn) whose prompt generation no longer owns the session: dropped."""

    code = "STALE_GENERATION"


class Forbidden(TurnwiseError):
    code = "FORBIDDEN"


class Unauthenticated(TurnwiseError):
    code = "UNAUTHENTICATED"


class Unavailable(TurnwiseError):
    """The database could not be reached or went away; the same request may be sent again
    (`extensions.retryable`). Only when a COMMIT's reply was lost may its change have been made
    (docs/architecture.md, "When the database fails")."""

    code = "UNAVAILABLE"

    def __init__(self, message: str = "the database is unavailable right now; retry shortly") -> None:
        super().__init__(message)


class CorruptData(TurnwiseError):
    """Stored data that the rules cannot interpret; never silently reset or repaired."""

    code = "CORRUPT_DATA"


class SummaryConvergenceError(TurnwiseError):
    """Task summaries could not be reconciled within the bounded compare-and-set retries."""

    code = "SUMMARY_NOT_CONVERGED"

    def __init__(self, task_ids: list[str]) -> None:
        super().__init__(f"task summaries did not converge: {', '.join(sorted(task_ids))}")
        self.task_ids = task_ids


class BrokenInvariant(RuntimeError):
    """A rule the code relies on did not hold: a defect, reported as an internal error (not a
    TurnwiseError, whose message a client may see). Raised explicitly: `assert` vanishes under -O."""


def present(value: T | None, what: str) -> T:
    """`value`, which the caller's invariant says exists; BrokenInvariant naming `what` otherwise."""
    if value is None:
        raise BrokenInvariant(f"{what} is missing")
    return value
