"""One real server per dialect for the black-box API tests, and clients for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.api.client import Client
from tests.dialects import served
from tests.servers import ADMIN_TOKEN, Server


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with served(request.param, request) as srv:  # PostgreSQL skips or fails when unreachable
        yield srv


@pytest.fixture
async def admin(server: Server) -> AsyncIterator[Client]:
    client = Client(server.base_url, ADMIN_TOKEN)
    yield client
    await client.aclose()
