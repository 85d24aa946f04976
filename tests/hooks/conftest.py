"""One real server per dialect for the hook tests, an admin client, and a person with a runner token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.api.client import Client

# The API tests' server per dialect and their admin client, for these tests too.
from tests.api.conftest import admin as admin
from tests.api.conftest import server as server
from tests.hooks.runner import person, runner_token
from tests.servers import Server


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
