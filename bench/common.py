"""Helpers shared by the benchmarks: databases, timing, result files."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

from backend.db import migrate
from backend.db.engine import Database

PG_URL = os.environ.get("TURNWISE_BENCH_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
RESULTS = Path(__file__).parent / "results"


async def _admin(statement: str) -> None:
    db = Database(PG_URL)
    try:
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(statement))
    finally:
        await db.dispose()


async def fresh_database(
    dialect: str, *, pool_size: int = 10
) -> tuple[Database, Callable[[], Awaitable[None]]]:
    """A new migrated database and a coroutine that drops it."""
    if dialect == "sqlite":
        path = Path(f"/tmp/turnwise-bench-{uuid.uuid4().hex[:8]}.db")
        db = Database(f"sqlite+aiosqlite:///{path}")

        async def drop() -> None:
            await db.dispose()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)  # noqa: ASYNC240 - teardown only

    else:
        name = f"turnwise_bench_{uuid.uuid4().hex[:10]}"
        await _admin(f'CREATE DATABASE "{name}"')
        db = Database(
            make_url(PG_URL).set(database=name).render_as_string(hide_password=False), pool_size=pool_size
        )

        async def drop() -> None:
            await db.dispose()
            await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    await migrate.upgrade(db)
    return db, drop


async def timed(fn: Callable[[], Awaitable[Any]], *, repeat: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        await fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return samples


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]
