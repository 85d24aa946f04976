"""The canary of `backend/db/driver_adapter.py`: every private or undocumented name of SQLAlchemy and
aiosqlite that the fast path relies on is still there, with the shape it relies on, and the installed
libraries are the versions those names were checked against. After an upgrade this fails first, and
says which names to re-check (in the new version's source) before `CHECKED` is moved on."""

from __future__ import annotations

import importlib
import inspect
import logging
import sqlite3
from typing import Any, cast

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from backend.db import driver_adapter as adapter
from backend.db.engine import Database

_WHERE = "backend/db/driver_adapter.py"


def _owner(reliance: adapter.Reliance) -> Any:
    module, name = reliance.owner.split(":")
    return getattr(importlib.import_module(module), name)


def _declared(owner: type, name: str) -> bool:
    """An attribute of the class, a slot of it or of a base, or an annotated instance attribute."""
    for klass in owner.__mro__:
        if name in vars(klass) or name in getattr(klass, "__slots__", ()):
            return True
        if name in getattr(klass, "__annotations__", {}):
            return True
    return False


def _recheck(library: str) -> str:
    names = [f"  {r.owner}.{r.name} ({r.kind})" for r in adapter.RELIED_ON if r.library == library]
    names += [f"  behaviour: {b}" for b in adapter.BEHAVIOURS.get(library, ())]
    return "\n".join(names)


def test_the_installed_libraries_are_the_versions_the_private_names_were_checked_against() -> None:
    installed = adapter.installed_versions()
    moved = {
        name: (adapter.CHECKED[name], found)
        for name, found in installed.items()
        if found != adapter.CHECKED[name]
    }
    assert not moved, "\n".join(
        f"{name} is {found}, but {_WHERE} was checked against {checked}. Re-check in {name} {found}'s source "
        f"that these still exist and mean what {_WHERE} says they do, run this canary and "
        f"tests/repository/test_prepared.py and tests/repository/test_fast_path.py, then set "
        f"CHECKED[{name!r}] = {found!r}:\n{_recheck(name)}"
        for name, (checked, found) in moved.items()
    )


@pytest.mark.parametrize("reliance", adapter.RELIED_ON, ids=lambda r: f"{r.owner.split(':')[1]}.{r.name}")
def test_each_relied_on_name_is_still_there(reliance: adapter.Reliance) -> None:
    owner = _owner(reliance)
    installed = adapter.installed_versions()[reliance.library]
    name = f"{reliance.owner}.{reliance.name} ({reliance.kind})"
    where = f"{reliance.library} {installed}: {name}, relied on by {_WHERE}"
    assert _declared(owner, reliance.name), f"{where} is gone"
    if reliance.kind == "property":
        assert isinstance(inspect.getattr_static(owner, reliance.name), property), (
            f"{where} is no longer a property"
        )
    if reliance.kind in ("method", "coroutine"):
        member = getattr(owner, reliance.name)
        assert callable(member), f"{where} is no longer callable"
        if reliance.kind == "coroutine":
            assert inspect.iscoroutinefunction(member), f"{where} is no longer a coroutine function"
        found = tuple(inspect.signature(member).parameters)[: len(reliance.parameters)]
        assert found == reliance.parameters, f"{where} now takes {found}, not {reliance.parameters}"


async def test_the_names_behave_as_relied_on_with_asyncpg(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1, fast_path=True)
    try:
        async with db.write() as conn:
            sync = conn.sync_connection
            assert sync is not None
            fairy = await conn.get_raw_connection()
            adapted = fairy.dbapi_connection
            # SQLAlchemy's transaction reaches the server with the adapter's first statement.
            assert not adapter.transaction_begun(adapted)
            assert adapter.plain_transaction(adapted)
            await adapter.begin_transaction(adapted)
            assert adapter.transaction_begun(adapted)
            driver: Any = fairy.driver_connection
            assert driver.is_in_transaction()
            # The adapter's cache of server-prepared statements, emptied on demand.
            await conn.execute(text("SELECT 1"))
            adapter.forget_prepared_statements(adapted)
            assert len(cast(Any, adapted)._prepared_statement_cache) == 0
            # Events fire through the connection's dispatch; the echo logger is the engine's.
            assert callable(sync.dispatch.after_cursor_execute)
            assert list(sync.dispatch.before_cursor_execute)  # the statement counter, at least
            assert sync.engine.logger.isEnabledFor(logging.INFO) is False
        # A driver error through the adapter's translation and SQLAlchemy's handling.

        async def divide_by_zero() -> None:
            async with db.write() as conn:
                fairy = await conn.get_raw_connection()
                driver: Any = fairy.driver_connection
                try:
                    await driver.fetch("SELECT 1/0")
                except asyncpg.PostgresError as exc:
                    await conn.run_sync(
                        adapter.raise_as_sqlalchemy, fairy.dbapi_connection, exc, "SELECT 1/0", [], None
                    )

        with pytest.raises(DBAPIError, match="division by zero"):
            await divide_by_zero()
        # A transaction registered as the adapter's is what SQLAlchemy's commit ends.
        ended: list[str] = []

        class Registered:
            async def start(self) -> None:
                raise AssertionError("not started by the adapter")

            async def commit(self) -> None:
                ended.append("commit")

            async def rollback(self) -> None:
                ended.append("rollback")

        async with db.write() as conn:
            fairy = await conn.get_raw_connection()
            adapter.register_transaction(fairy.dbapi_connection, Registered())
        assert ended == ["commit"]
    finally:
        await db.dispose()


async def test_the_names_behave_as_relied_on_with_aiosqlite(sqlite_url: str) -> None:
    db = Database(sqlite_url, fast_path=True)
    try:
        async with db.write() as conn:
            fairy = await conn.get_raw_connection()
            raw = adapter.sqlite_connection(fairy.driver_connection)
            assert isinstance(raw, sqlite3.Connection)
            assert raw.in_transaction  # BEGIN IMMEDIATE ran on it
    finally:
        await db.dispose()


async def test_asyncpg_behaves_as_relied_on(pg_url: str) -> None:
    from asyncpg.exceptions import InvalidSQLStatementNameError  # type: ignore[import-untyped]

    dsn = pg_url.replace("postgresql+asyncpg://", "postgresql://")
    listed = "SELECT count(*) FROM pg_prepared_statements"
    uncached = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        await uncached.fetch("SELECT $1::int", 1)
        await (await uncached.prepare("SELECT $1::int + 1", name="")).fetch(1)
        assert await uncached.fetchval(listed) == 0  # nothing named was prepared
    finally:
        await uncached.close()
    cached = await asyncpg.connect(dsn)
    try:
        await cached.fetch("SELECT $1::int", 1)
        await cached.execute("DEALLOCATE ALL")
        with pytest.raises(InvalidSQLStatementNameError) as vanished:
            await cached.fetch("SELECT $1::int", 1)
        assert vanished.value.sqlstate == "26000"
        await cached.reload_schema_state()
        assert await cached.fetch("SELECT $1::int", 1) == [(1,)]  # prepared anew
    finally:
        await cached.close()
