"""What the reach tests that run real servers share: the servers' settings, a way to start them on
new or shared databases, and a person who may see a task an agent asks in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from tests.api.client import Client
from tests.api.gql import GRANT, running_session, token_for
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

PUBLIC = "http://turnwise.example"
ENV = {
    "TURNWISE_NOTIFY_AFTER_SECONDS": "0.3",
    "TURNWISE_NOTIFY_POLL_SECONDS": "0.1",
    "TURNWISE_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1",
    "TURNWISE_PUBLIC_URL": PUBLIC,
}

StartServer = Callable[..., Awaitable[Server]]


@asynccontextmanager
async def servers() -> AsyncIterator[StartServer]:
    """`await make(dialect, env)`: a server on a new database (`url=` for another server on one,
    `broadcast_url=` for a shared bus); every server stopped and every database dropped at the end."""
    started: list[Server] = []
    databases: list[str] = []

    async def make(
        dialect: str = "sqlite",
        env: dict[str, str] | None = None,
        *,
        url: str | None = None,
        broadcast_url: str = "memory://",
    ) -> Server:
        if url is None:
            url = await asyncio.to_thread(fresh_database, dialect)
            databases.append(url)
        server = Server(url, env={**ENV, **(env or {})}, broadcast_url=broadcast_url)
        started.append(server)
        return await asyncio.to_thread(server.start)

    try:
        yield make
    finally:
        for server in started:
            await asyncio.to_thread(server.stop)
        for url in databases:
            await asyncio.to_thread(drop_database, url)


@asynccontextmanager
async def people(server: Server) -> AsyncIterator[tuple[Client, Client, str, str, str]]:
    """(admin, the person, task id, session id, the agent's token): the person may see the task."""
    admin = Client(server.base_url, ADMIN_TOKEN)
    task_id, session_id = await running_session(admin, title="Release 2.4")
    user_id, user_token = await token_for(admin, "user", name="dana")
    await admin.execute(GRANT, {"u": user_id, "t": task_id})
    _, agent_token = await token_for(admin, "agent", name="release-agent", session_id=session_id)
    person = Client(server.base_url, user_token)
    try:
        yield admin, person, task_id, session_id, agent_token
    finally:
        await person.aclose()
        await admin.aclose()
