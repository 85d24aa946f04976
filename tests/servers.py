"""Real server processes for black-box tests: `turnwise serve` on a free port, its own database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from tests.conftest import PG_URL, _admin, _migrate

ADMIN_TOKEN = "test-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_database(dialect: str, *, migrated: bool = True) -> str:
    """A new, empty database of the dialect, migrated by this checkout's code unless `migrated` is
    False (a server of another checkout then migrates it itself); dropped with its process."""
    if dialect == "sqlite":
        path = Path(tempfile.mkdtemp(prefix="turnwise-srv-")) / "turnwise.db"
        url = f"sqlite+aiosqlite:///{path}"
    else:
        name = f"turnwise_srv_{uuid.uuid4().hex[:12]}"
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
        url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    if migrated:
        asyncio.run(_migrate(url))
    return url


def drop_database(url: str) -> None:
    if url.startswith("postgresql"):
        name = make_url(url).database
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class Server:
    """One `turnwise serve` process (`command="demo"`: `turnwise demo`). `stop()` is graceful; `kill()`
    is a crash."""

    def __init__(
        self,
        database_url: str,
        *,
        env: dict[str, str] | None = None,
        broadcast_url: str = "memory://",
        command: str = "serve",
    ):
        self.command = command
        self.database_url = database_url
        self.broadcast_url = broadcast_url
        self.extra_env = dict(env or {})
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="turnwise-server-", suffix=".log")[1])

    def start(self, *, wait: bool = True) -> Server:
        env = {
            **os.environ,
            "TURNWISE_BOOTSTRAP_TOKEN": ADMIN_TOKEN,
            "TURNWISE_DATABASE_URL": self.database_url,
            "TURNWISE_BROADCAST_URL": self.broadcast_url,
            "TURNWISE_PORT": str(self.port),
            **self.extra_env,
        }
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "backend.cli", self.command], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-20000:]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextlib.contextmanager
def server_pair(
    dialect: str, *, broadcast_url: str = "memory://", env: dict[str, str] | None = None
) -> Iterator[tuple[Server, Server]]:
    """Two server processes behind one fresh database, as in a scaled deployment."""
    url = fresh_database(dialect)
    a = Server(url, broadcast_url=broadcast_url, env=env).start()
    b = Server(url, broadcast_url=broadcast_url, env=env).start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()
        drop_database(url)
