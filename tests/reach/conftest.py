"""Fixtures of the reach tests: real servers (`start`) on either dialect (`dialect`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.reach.support import StartServer, servers


@pytest.fixture
async def start() -> AsyncIterator[StartServer]:
    """`await start(dialect, env)`: see `support.servers`."""
    async with servers() as make:
        yield make


@pytest.fixture(params=["sqlite", "postgresql"])
def dialect(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")  # skips, or fails where PostgreSQL is required
    return str(request.param)
