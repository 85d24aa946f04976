"""Our side of the graphql-transport-ws handler: what each operation's task knows, and when its results
may skip the schema's extensions.

`backend/api/strawberry_adapter.py` extends Strawberry's handler through undocumented names; what
that handler keeps is ours and is here: the operation the current task runs (`running_operation`,
recorded in a context variable by the handler's `run_operation`), the test of a schema's extensions
for sending results directly (`results_sendable_directly`, public hooks only), and the callback that
drops a cancelled `connection_init` timer's error (`drop_cancellation`).
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar
from typing import Any


def drop_cancellation(task: asyncio.Task[Any]) -> None:
    """A cancelled task hands its CancelledError back once; reading it drops the task's own reference,
    and with it the traceback and the frames of the wait."""
    if task.cancelled():
        with contextlib.suppress(asyncio.CancelledError):
            task.result()


class RunningOperation:
    """The graphql-transport-ws operation the current task runs (its `Operation`), and the executor of
    its subscription's events once one was built (`backend/api/graphql_core_adapter.py` records it there)."""

    __slots__ = ("executor", "operation")

    def __init__(self, operation: Any) -> None:
        self.operation = operation
        self.executor: Any = None


# Set by the adapter's handler (`strawberry_adapter.transport_ws_handler`) for each operation it runs
# (the operation's own task and context).
RUNNING: ContextVar[RunningOperation | None] = ContextVar("turnwise_running_operation", default=None)


def running_operation() -> RunningOperation | None:
    """The operation the current task runs, where its results may be sent directly
    (`strawberry_adapter.send_next_data`): over the adapter's handler, with no extension that must see
    each result (see `strawberry_adapter.use_in`)."""
    return RUNNING.get()


def results_sendable_directly(schema: Any) -> bool:
    """Whether a result without errors may skip the schema's extensions: none of them has results of
    its own, or a hook for each streamed result other than `MaskErrors`' (which only masks errors)."""
    from strawberry.extensions import MaskErrors, SchemaExtension

    for extension in schema.extensions:
        cls: Any = extension if isinstance(extension, type) else type(extension)
        if cls.on_stream_result not in (SchemaExtension.on_stream_result, MaskErrors.on_stream_result):
            return False
        if cls.get_results is not SchemaExtension.get_results:
            return False
    return True
