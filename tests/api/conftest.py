"""One real server per dialect for the black-box API tests, and clients for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.api.client import Client
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")  # skips or fails when PostgreSQL is unreachable
    url = fresh_database(request.param)
    srv = Server(url).start()
    try:
        yield srv
    finally:
        srv.stop()
        drop_database(url)


@pytest.fixture
async def admin(server: Server) -> AsyncIterator[Client]:
    client = Client(server.base_url, ADMIN_TOKEN)
    yield client
    await client.aclose()
