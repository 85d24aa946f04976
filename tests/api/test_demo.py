"""`turnwise demo` (what `make run` starts) serves the API with demo data and prints working URLs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import httpx

from tests.servers import free_port


def test_demo_prints_working_urls_and_serves_demo_data() -> None:
    port = free_port()
    data_home = tempfile.mkdtemp(prefix="turnwise-demo-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNWISE_")}
    env.update(XDG_DATA_HOME=data_home, TURNWISE_PORT=str(port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "backend.cli", "demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        banner = ""
        deadline = time.monotonic() + 30
        while "Ctrl-C stops it" not in banner and time.monotonic() < deadline:
            banner += proc.stdout.readline().decode()
        token = re.search(r"token:\s+(\S+)", banner)
        assert token, banner
        assert f"http://127.0.0.1:{port}/graphql" in banner
        assert f"http://127.0.0.1:{port}/#token={token.group(1)}" in banner
        assert data_home in banner, "the embedded database lives in the per-user data folder"
        # The block comes last, once the server is ready: nothing of start-up scrolls it away,
        # and routine start-up and library lines are for --log-level debug.
        _, _, block = banner.partition("Turnwise demo is ready")
        assert block, banner
        for routine in ("startup: ", "alembic", "HTTP Request", "Uvicorn running", "npm notice"):
            assert routine not in banner, routine
        # And it stays last: the demo agent and the background workers print nothing after it.
        os.set_blocking(proc.stdout.fileno(), False)
        time.sleep(2)
        assert not (proc.stdout.read() or b"").strip(), "output after the URL block"
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200  # ready when it says so
        body = httpx.post(
            f"{base}/graphql",
            json={"query": "{ tasks { title sessions { pendingAction } } }"},
            headers={"Authorization": f"Bearer {token.group(1)}"},
        ).json()
        titles = {t["title"] for t in body["data"]["tasks"]}
        assert "Review the migration plan" in titles
        actions = {s["pendingAction"] for t in body["data"]["tasks"] for s in t["sessions"]}
        assert "PERMISSION" in actions
    finally:
        proc.terminate()
        proc.wait(timeout=15)
