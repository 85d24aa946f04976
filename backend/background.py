"""Stopping the background tasks a component started: bounded, and without hiding how any ended.

A shutdown must never hang. A task that does not end within the bound once cancelled (one that
swallowed its cancellation, or waits in a cleanup that cannot finish) is left behind and logged with
the stack it is stuck in, so the rest of the shutdown goes on and the log says where to look.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

# How long a stop waits for its cancelled tasks to end (they normally end at their next await).
STOP_SECONDS = 5.0


async def stop_tasks(
    tasks: Iterable[asyncio.Task[Any] | None], log: logging.Logger, what: str, seconds: float = STOP_SECONDS
) -> None:
    """Cancel every task, then wait for them, at most `seconds`: cancellation is the expected end; an
    error a task had already ended with is logged (a programming error must not vanish at
    shutdown), and so is a task still running at the bound, with its stack (it is left behind)."""
    pending = [t for t in tasks if t is not None]
    for task in pending:
        task.cancel()
    if not pending:
        return
    # `asyncio.wait` returns at the bound without waiting for the stragglers (unlike `wait_for`, which
    # waits for what it cancelled), and a cancellation of this caller does not cancel them again.
    _, stuck = await asyncio.wait(pending, timeout=seconds)
    for task in pending:
        if task in stuck:
            stack = task.get_stack()
            frames = "".join(f"\n  {f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}" for f in stack)
            log.error(
                "%s did not stop within %gs of its cancellation; left behind at:%s",
                what,
                seconds,
                frames or " (no frame)",
                extra={"event": "task.stuck", "task": task.get_name()},
            )
        elif not task.cancelled() and task.exception() is not None:
            log.error(
                "%s had failed before it was stopped",
                what,
                exc_info=task.exception(),
                extra={"event": "task.failed"},
            )
