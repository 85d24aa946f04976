"""Databases for tests: a SQLite file and a real PostgreSQL database created for this run.

PostgreSQL is skipped only when it is unreachable and TURNWISE_REQUIRE_PG is unset.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import delete, text
from sqlalchemy.engine import make_url

from backend.db import migrate
from backend.db.engine import Database
from backend.db.tables import metadata
from tests.hang_guard import pytest_runtest_call
from tests.lifecycle.support import kind
from tests.scenarios import pytest_collection_modifyitems

# The scenario marker's check runs on every collection; `kind` is each kind of pending action; a hung
# async test ends in its own coroutine with every task's stack printed (`tests/hang_guard.py`).
__all__ = ["kind", "pytest_collection_modifyitems", "pytest_runtest_call"]

PG_URL = os.environ.get("TURNWISE_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TURNWISE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, url: str, env: str, default_port: int) -> None:
    parsed = urlsplit(url)
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or default_port
    if _reachable(host, port):
        return
    if os.environ.get(env) == "1":
        pytest.fail(f"{name} at {host}:{port} is unreachable and {env}=1")
    pytest.skip(f"{name} at {host}:{port} is unreachable (set {env}=1 to make this a failure)")


def redis_url() -> str:
    require_service("Redis", REDIS_URL, "TURNWISE_REQUIRE_REDIS", 6379)
    return REDIS_URL


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("db") / "turnwise.db"
    url = f"sqlite+aiosqlite:///{path}"
    asyncio.run(_migrate(url))
    return url


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    require_service("PostgreSQL", PG_URL, "TURNWISE_REQUIRE_PG", 5432)
    name = f"turnwise_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    asyncio.run(_migrate(url))
    yield url
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _admin(statement: str) -> None:
    # Creating and dropping databases is not the service's work: DROP DATABASE waits for a
    # checkpoint, which on a busy machine takes longer than the service's 2 s statement bound.
    db = Database(PG_URL, connect_timeout=30, statement_timeout=120)
    try:
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(statement))
    finally:
        await db.dispose()


async def _migrate(url: str) -> None:
    db = Database(url)
    try:
        await migrate.upgrade(db)
    finally:
        await db.dispose()


async def wipe(db: Database) -> None:
    async with db.write() as conn:
        for table in reversed(metadata.sorted_tables):
            await conn.execute(delete(table))


@pytest.fixture(params=["sqlite", "postgresql"])
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(dialect: str, request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if dialect == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    await wipe(database)
    try:
        yield database
    finally:
        await database.dispose()
