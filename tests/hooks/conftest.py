"""One real server per dialect for the hook tests, an admin client, and a person with a runner token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from tests.api.client import Client
from tests.dialects import served
from tests.hooks.runner import person, runner_token
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


@dataclass
class Owner:
    """A person (with a token of their own) and the runner token they issued."""

    user_id: str
    token: str
    runner_id: str
    runner_token: str


@pytest.fixture
async def owner(server: Server, admin: Client) -> Owner:
    user_id, token = await person(admin)
    issued = await runner_token(server.base_url, token)
    return Owner(user_id, token, issued["id"], issued["token"])


@pytest.fixture
async def runner(server: Server, owner: Owner) -> AsyncIterator[Client]:
    client = Client(server.base_url, owner.runner_token)
    yield client
    await client.aclose()
