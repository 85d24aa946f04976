"""A fresh database of either dialect, and a real server on it, for fixtures to yield from a `with`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.servers import Server, drop_database, fresh_database


@contextlib.contextmanager
def fresh_db(dialect: str, request: pytest.FixtureRequest | None = None) -> Iterator[str]:
    """A new, migrated database of ``dialect``, dropped afterwards.

    Given the fixture's ``request``, PostgreSQL asks for ``pg_url`` first, which skips (or fails,
    where PostgreSQL is required) when it is unreachable.
    """
    if dialect == "postgresql" and request is not None:
        request.getfixturevalue("pg_url")
    url = fresh_database(dialect)
    try:
        yield url
    finally:
        drop_database(url)


@contextlib.contextmanager
def served(
    dialect: str, request: pytest.FixtureRequest | None = None, *, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """A started server on ``fresh_db(dialect, request)``, stopped before its database is dropped."""
    with fresh_db(dialect, request) as url:
        server = Server(url, env=env).start()
        try:
            yield server
        finally:
            server.stop()
