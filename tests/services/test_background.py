"""Stopping background tasks never hides how one of them had ended."""

from __future__ import annotations

import asyncio
import logging

import pytest

from backend.services.background import stop_tasks

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
