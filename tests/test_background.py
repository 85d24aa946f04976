"""Stopping background tasks never hides how one of them had ended."""

from __future__ import annotations

import asyncio
import logging

import pytest

from backend.background import stop_tasks

log = logging.getLogger("turnwise.test.background")


async def test_a_task_that_had_failed_is_logged_and_a_cancelled_one_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken() -> None:
        raise KeyError("a programming error")

    async def idle() -> None:
        await asyncio.Event().wait()

    failed = asyncio.create_task(broken())
    running = asyncio.create_task(idle())
    await asyncio.wait([failed])
    with caplog.at_level(logging.ERROR, logger=log.name):
        await stop_tasks([failed, running], log, "test task")
    assert running.cancelled()
    errors = [r for r in caplog.records if r.name == log.name]
    assert [r.getMessage() for r in errors] == ["test task had failed before it was stopped"]
    assert errors[0].exc_info is not None
    assert isinstance(errors[0].exc_info[1], KeyError)


async def test_a_task_that_does_not_end_once_cancelled_is_left_behind_within_the_bound_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        # Swallows its cancellation and waits on, as a cleanup that cannot finish would.
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with caplog.at_level(logging.ERROR, logger=log.name):
        await stop_tasks([task, None], log, "test task", seconds=0.2)
    assert loop.time() - started < 2.0
    assert not task.done()
    [record] = [r for r in caplog.records if r.name == log.name]
    assert "test task did not stop within 0.2s" in record.getMessage()
    assert "in stubborn" in record.getMessage()
    release.set()
    await task
