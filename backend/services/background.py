"""Stopping the background tasks a service started, without hiding how any of them ended."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]], log: logging.Logger, what: str) -> None:
    """Cancel every task, then wait for each: cancellation is the expected end; an error a task had
    already ended with is logged (a programming error must not vanish at shutdown)."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        try:
            await task
        except asyncio.CancelledError:
            continue
        except Exception:
            log.exception("%s had failed before it was stopped", what, extra={"event": "task.failed"})
