"""A hung async test ends in its own coroutine, with every task's stack printed, before the run's
per-test timeout would abort the event loop under it.

Every async test of a worker runs on one session event loop. When pytest-timeout aborts a hung test,
the test's coroutine stays pending on that loop: whatever it started (server processes, buses,
heartbeats) keeps running into the next tests, and the report shows only the idle loop's `select`.
So, `GRACE` seconds before that timeout, this guard prints the stack of every asyncio task (where the
hang is) and cancels the test's own task: it fails there, and its context managers unwind.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

GRACE = 30.0


def _running_loop_of_main_thread() -> asyncio.AbstractEventLoop | None:
    """The event loop the main thread is running now (found on its stack), if any."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, asyncio.AbstractEventLoop) and candidate.is_running():
            return candidate
        frame = frame.f_back
    return None


def _expire(test_name: str) -> None:
    loop = _running_loop_of_main_thread()
    if loop is None:
        return

    def in_loop() -> None:
        tasks = asyncio.all_tasks(loop)
        print(f"\n--- hang guard: {test_name} still running; {len(tasks)} asyncio tasks ---", file=sys.stderr)
        for task in tasks:
            print(f"* {task!r}", file=sys.stderr)
            task.print_stack(limit=12, file=sys.stderr)
        for task in tasks:
            coro: Any = task.get_coro()
            if getattr(getattr(coro, "cr_code", None), "co_name", None) == test_name:
                task.cancel(f"hang guard: {test_name} exceeded its bound")

    loop.call_soon_threadsafe(in_loop)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    function = getattr(item, "function", None)
    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
    if function is None or not inspect.iscoroutinefunction(function) or timeout <= 2 * GRACE:
        return (yield)
    timer = threading.Timer(timeout - GRACE, _expire, args=(function.__name__,))
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()
