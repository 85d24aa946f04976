"""Real brokers to break: a `redis-server` of the test's own on a free port (stopped, restarted,
paused and resumed), and the PostgreSQL bus's listening connection, terminated by
`pg_terminate_backend` restricted to this test's database and the bus's application name."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from backend.db.engine import Database
from tests.conftest import PG_URL, require_service
from tests.processes import end_process
from tests.servers import free_port

T = TypeVar("T")


class RedisProcess:
    """A redis-server of this test alone (or of a benchmark, given the ``binary``): never the shared one."""

    def __init__(self, binary: str | None = None) -> None:
        binary = binary or shutil.which("redis-server")
        if binary is None:
            if os.environ.get("TURNWISE_REQUIRE_REDIS") == "1":
                pytest.fail("redis-server is not installed and TURNWISE_REQUIRE_REDIS=1")
            pytest.skip("redis-server is not installed (set TURNWISE_REQUIRE_REDIS=1 to make this a failure)")
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = Path(tempfile.mkdtemp(prefix="turnwise-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                import socket

                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        end_process(self.proc)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def redis_process(binary: str | None = None) -> Iterator[RedisProcess]:
    redis = RedisProcess(binary).start()
    try:
        yield redis
    finally:
        redis.stop()
        shutil.rmtree(redis.dir, ignore_errors=True)


def pg_bus_url(database_url: str) -> str:
    """The PostgreSQL bus on the database a test (or its servers) uses: postgres://..."""
    url = make_url(database_url)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def require_pg() -> None:
    require_service("PostgreSQL", PG_URL, "TURNWISE_REQUIRE_PG", 5432)


async def _terminate_where(database_url: str, condition: str, **params: Any) -> list[bool]:
    """`pg_terminate_backend` on each connection to this test's database that meets ``condition``."""
    db = Database(PG_URL)
    try:
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            statement = (
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :db AND {condition}"
            )
            found = await conn.execute(
                text(statement),
                {"db": make_url(database_url).database, **params},
            )
            return [bool(terminated) for (terminated,) in found.all()]
    finally:
        await db.dispose()


async def terminate_bus_listeners(database_url: str) -> int:
    """Terminate the PostgreSQL bus's listening connections to this database (and nothing else)."""
    condition = "application_name = 'turnwise-bus-listen' AND pid <> pg_backend_pid()"
    return len(await _terminate_where(database_url, condition))


async def terminate_backend(database_url: str, pid: int) -> bool:
    """Terminate one server process of this test's database, by pid."""
    return any(await _terminate_where(database_url, "pid = :pid", pid=pid))


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, within: float = 20.0, what: str = "condition"
) -> T:
    """Poll until `probe` returns something truthy; fail after a generous deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last: Any = None
    while loop.time() < deadline:
        try:
            value = await probe()
        except Exception as exc:  # noqa: BLE001 - a probe may fail while the bus is down
            last = exc
        else:
            last = value
            if value:
                return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached within {within}s (last: {last!r})")
