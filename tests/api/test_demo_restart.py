"""`turnwise demo` (what `make run` starts) told the truth: its permission request is a real one that a
person allows through the API and the demo agent reacts to, and starting it again on the same
database neither duplicates the demo nor orphans what it asked (the agent takes it up again)."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.api.client import Client
from tests.api.kinds import RESPOND_PERMISSION
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

TASKS = """{ tasks { id title sessions { id
  activeClarification { pendingId state }
  activePermission { pendingId state toolName input context } } } }"""
MESSAGES = "query($s: ID!) { sessionMessages(sessionId: $s) { kind author content } }"
ALLOWED = (
    "You allowed it: I ran `alembic upgrade head` against staging (I am the demo agent: nothing really ran)."
)


@pytest.fixture
def demo_database(dialect: str, request: pytest.FixtureRequest) -> Iterator[str]:
    if dialect == "postgresql":
        request.getfixturevalue("pg_url")  # skips, or fails where PostgreSQL is required
    url = fresh_database(dialect)
    try:
        yield url
    finally:
        drop_database(url)


@contextmanager
def demo(url: str) -> Iterator[Server]:
    """`turnwise demo` on `url`, until the block ends (stopped as Ctrl-C stops it)."""
    server = Server(url, command="demo", env={"XDG_DATA_HOME": tempfile.mkdtemp(prefix="turnwise-demo-")})
    server.start(wait=False)
    try:
        server.wait_ready(timeout=120)  # the demo's start-up imports more than a server's
        yield server
    finally:
        server.stop()


async def until(read: Any, check: Any, seconds: float = 30.0) -> Any:
    """`await read()` again until `check(value)` holds; that value."""
    for _ in range(int(seconds / 0.1)):
        value = await read()
        if check(value):
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {str(value)[:1500]}")


def _one(tasks: list[dict[str, Any]], title: str) -> dict[str, Any]:
    (task,) = [t for t in tasks if t["title"] == title]
    return task


def migration(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The session in which the demo agent asks to run the migration."""
    session: dict[str, Any] = _one(tasks, "Review the migration plan")["sessions"][1]
    return session


def questions(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    session: dict[str, Any] = _one(tasks, "Demo agent: configure the webhook service")["sessions"][0]
    return session


def tasks_of(admin: Client) -> Any:
    async def read() -> list[dict[str, Any]]:
        return list((await admin.execute(TASKS))["tasks"])

    return read


def asking(state: str) -> Any:
    def check(tasks: list[dict[str, Any]]) -> bool:
        request = migration(tasks)["activePermission"]
        question = questions(tasks)["activeClarification"]
        return request is not None and request["state"] == state and question is not None

    return check


async def test_the_demo_started_again_on_its_database_is_one_demo_whose_permission_request_is_allowed(
    demo_database: str,
) -> None:
    with demo(demo_database) as first:
        admin = Client(first.base_url, ADMIN_TOKEN)
        try:
            tasks = await until(tasks_of(admin), asking("ACTIVE_LIVE"))
        finally:
            await admin.aclose()
        request = migration(tasks)["activePermission"]
        assert (request["toolName"], request["input"]["command"]) == ("Bash", "alembic upgrade head")
        assert request["context"] == "May I run the migration against staging?"
        question = questions(tasks)["activeClarification"]["pendingId"]

    with demo(demo_database) as again:
        admin = Client(again.base_url, ADMIN_TOKEN)
        try:
            # The agent takes up what it asked: the same request and question, waited on live again.
            tasks = await until(tasks_of(admin), asking("ACTIVE_LIVE"))
            titles = Counter(t["title"] for t in tasks)
            assert titles == {
                "Add retry to the payment webhook": 1,
                "Review the migration plan": 1,
                "Fix flaky login test": 1,
                "Demo agent: configure the webhook service": 1,
            }
            assert migration(tasks)["activePermission"]["pendingId"] == request["pendingId"]
            assert questions(tasks)["activeClarification"]["pendingId"] == question

            allowed = await admin.execute(RESPOND_PERMISSION, {"p": request["pendingId"], "b": "ALLOW"})
            assert allowed["respondToPermission"]["__typename"] == "PermissionResponded"
            session = {"s": migration(tasks)["id"]}
            said = await until(
                lambda: admin.execute(MESSAGES, session),
                lambda m: any(x["content"] == ALLOWED for x in m["sessionMessages"]),
            )
        finally:
            await admin.aclose()

    with demo(demo_database) as third:
        admin = Client(third.base_url, ADMIN_TOKEN)
        try:
            tasks = await until(tasks_of(admin), lambda t: questions(t)["activeClarification"])
            await asyncio.sleep(1.0)  # time for the agent to ask again, which it must not
            # Reacted to already: not asked again, nothing said again.
            assert migration((await admin.execute(TASKS))["tasks"])["activePermission"] is None
            assert await admin.execute(MESSAGES, session) == said
            assert len(tasks) == 4
        finally:
            await admin.aclose()
