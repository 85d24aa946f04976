"""A redis:// bus needs the optional `redis` extra: without it, startup stops with a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.bus import EventBus, MissingBusBackend

REPO = Path(__file__).resolve().parents[2]


def test_a_redis_bus_without_the_redis_package_is_refused_with_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A None entry makes `import redis` fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(MissingBusBackend, match=r"redis:// .*pip install 'turnwise\[redis\]'"):
        EventBus("redis://127.0.0.1:6379/0")
    # The in-process bus needs nothing optional.
    assert EventBus("memory://").url == "memory://"


def test_serve_exits_non_zero_naming_the_missing_extra_before_serving(tmp_path: Path) -> None:
    hide_redis = (
        "import sys; sys.modules['redis'] = None; sys.modules['redis.asyncio'] = None; "
        "from backend.cli import main; raise SystemExit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            hide_redis,
            "serve",
            "--port",
            "9",
            "--database-url",
            f"sqlite+aiosqlite:///{tmp_path / 'turnwise.db'}",
            "--broadcast-url",
            "redis://127.0.0.1:6379/0",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "pip install 'turnwise[redis]'" in done.stderr
    assert "Uvicorn running" not in done.stderr
    # Nothing was created: the refusal comes before the database is touched.
    assert not (tmp_path / "turnwise.db").exists()
