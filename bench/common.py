"""Helpers shared by the benchmarks: databases, timing, result files."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url

from backend.db import migrate
from backend.db.engine import Database
from tests.servers import free_port

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


@dataclass
class ServerProcess:
    """A server under test (`python -m <args>`: `turnwise serve` or a floor) on a free port, its log
    in a file; ready once `/readyz` answers 200."""

    kind: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=lambda: Path(tempfile.mkstemp(prefix="bench-server-")[1]))
    ready_seconds: float = 30
    stop_seconds: float = 15
    cwd: str | None = None  # where the server starts (another checkout's code runs from its own)
    python: str = sys.executable  # the interpreter (another checkout's, with the packages it locks)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                [self.python, "-m", *self.args, "--port", str(self.port)],
                env={**os.environ, **self.env},
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def start(self) -> None:
        self.proc = await asyncio.to_thread(self.spawn)
        deadline = time.monotonic() + self.ready_seconds
        async with httpx.AsyncClient() as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.kind} exited:\n{self.log_path.read_text()[-4000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.base_url}/readyz", timeout=1)).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.kind} not ready:\n{self.log_path.read_text()[-4000:]}")

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, self.stop_seconds)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        self.log_path.unlink(missing_ok=True)
