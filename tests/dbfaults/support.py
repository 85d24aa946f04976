"""Real databases to break: a PostgreSQL cluster of the test's own (`initdb` in a temporary folder,
its own port) that tests restart, stop, kill and pause, and a PgBouncer of the test's own in front
of it in transaction pooling mode. Never the shared server: breaking that would break every other
test. As root, the cluster runs as the `postgres` user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import end_process
from tests.servers import free_port


def _missing(what: str, env: str = "TURNWISE_REQUIRE_PG") -> None:
    if os.environ.get(env) == "1":
        pytest.fail(f"{what} and {env}=1")
    pytest.skip(f"{what} (set {env}=1 to make this a failure)")


def _pg_bindir() -> Path | None:
    # Debian keeps a version's server tools together; a `pg_ctl` on PATH may be a lone link to one.
    roots = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    found = shutil.which("pg_ctl")
    if found:
        roots.append(Path(found).resolve().parent)
    return next((r for r in roots if (r / "pg_ctl").exists() and (r / "createdb").exists()), None)


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class PgCluster:
    """One PostgreSQL cluster of this test alone, on 127.0.0.1:`port`, trust auth, database `test`."""

    def __init__(self) -> None:
        bindir = _pg_bindir()
        if bindir is None:
            _missing("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
        assert bindir is not None
        self.bindir = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="turnwise-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        # PostgreSQL will not run as root: the cluster then belongs to the `postgres` user.
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                _missing("tests run as root and there is no `postgres` user to run a cluster as")
            self.user = "postgres"
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/test"

    def _run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=timeout)

    def init(self) -> PgCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        # fsync off: a crash here is PostgreSQL's alone, and the OS keeps what it wrote, so commits
        # stay durable across `-m immediate` (synchronous_commit stays on: that one would lose them).
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\nfsync = off\n"
                "full_page_writes = off\nmax_connections = 100\nshared_buffers = 32MB\n"
            )
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "test")
        return self

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        _wait_port(self.port, 30)

    def stop(self, mode: str = "fast") -> None:
        self.resume()  # a paused postmaster cannot act on a signal to stop
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "-l", str(self.log), "restart"
        )
        _wait_port(self.port, 30)

    def ensure_running(self) -> None:
        """Running and not paused, whatever a test before left it as (one that failed before it
        brought the cluster back, say)."""
        self.resume()
        if self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode != 0:
            self.start()

    def kill(self) -> None:
        """A crash: `-m immediate` ends every backend at once, with no shutdown checkpoint."""
        self.stop("immediate")

    def _pids(self) -> list[int]:
        pidfile = self.data / "postmaster.pid"
        try:
            postmaster = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout
        return [postmaster, *(int(p) for p in children.split())]

    def pause(self) -> None:
        """A partition that closes no connection: every process of the cluster stopped (SIGSTOP)."""
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def database_url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def createdb(self, name: str) -> str:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return self.database_url(name)

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def pg_cluster() -> Iterator[PgCluster]:
    cluster = PgCluster().init()
    try:
        yield cluster
    finally:
        cluster.destroy()


class PgBouncer:
    """PgBouncer of this test alone in front of `cluster`, `pool_mode = transaction`."""

    def __init__(self, cluster: PgCluster, *, pool_size: int = 10) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            _missing("pgbouncer is not installed (apt-get install -y pgbouncer; `make test` does it)")
        self.binary = binary
        self.cluster = cluster
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="turnwise-pgbouncer-"))
        if cluster.user is not None:
            entry = pwd.getpwnam(cluster.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        (self.dir / "users.txt").write_text('"postgres" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={cluster.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'users.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n"
            "server_reset_query = DISCARD ALL\nignore_startup_parameters = extra_float_digits\n"
            # After a failed login to a restarting server PgBouncer refuses clients for this long
            # (15 s by default); the README recommends 1 s too.
            "server_login_retry = 1\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PgBouncer:
        command = [self.binary, str(self.dir / "pgbouncer.ini")]
        if self.cluster.user is not None:
            command = ["runuser", "-u", self.cluster.user, "--", *command]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.port, 20)
        return self

    def database_url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        end_process(self.proc)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
