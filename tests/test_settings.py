"""Settings from TURNWISE_*: one syntax per type, and a bad value stops the command naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from backend.config import Settings, env_name

SWITCHES = [name for name, field in Settings.model_fields.items() if field.annotation in (bool, "bool")]
LISTS = ["allowed_origins", "allowed_hosts", "fault_points", "scripted_outcomes", "outbound_allowed_hosts"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in os.environ:
        if name.startswith("TURNWISE_"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("command", ["serve", "demo", "migrate"])
def test_a_bad_value_stops_the_command_with_one_line_naming_each_variable(
    tmp_path: Path, command: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNWISE_")}
    env.update(
        XDG_DATA_HOME=str(tmp_path),
        TURNWISE_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}",
        TURNWISE_PORT="x",
        TURNWISE_ACCESS_LOG="maybe",
        TURNWISE_MAX_WAIT_SECONDS="soon",
        TURNWISE_DB_POOLER="pgpool",
    )
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", command], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert sorted(done.stderr.splitlines()) == sorted(
        [
            f"turnwise {command}: error: TURNWISE_PORT: Input should be a valid integer, unable to parse "
            "string as an integer (got 'x')",
            f"turnwise {command}: error: TURNWISE_ACCESS_LOG: Input should be a valid boolean, unable to "
            "interpret input (got 'maybe')",
            f"turnwise {command}: error: TURNWISE_MAX_WAIT_SECONDS: Input should be a valid number, "
            "unable to parse string as a number (got 'soon')",
            f"turnwise {command}: error: TURNWISE_DB_POOLER must be one of pgbouncer or unset "
            "(got 'pgpool'): pgbouncer means PgBouncer in pool_mode = transaction between Turnwise and "
            "PostgreSQL",
        ]
    )
    assert not (tmp_path / "x.db").exists(), "nothing ran"


def test_every_switch_reads_one_syntax_and_empty_is_its_default(clean_env: pytest.MonkeyPatch) -> None:
    assert {"demo", "access_log", "ws_compression", "db_fast_path", "ws_adapter", "mcp_adapter"} <= set(
        SWITCHES
    )
    defaults = Settings()
    for name in SWITCHES:
        for raw, on in [("1", True), ("0", False), ("TRUE", True), ("false", False), ("Yes", True),
                        ("no", False), ("on", True), ("OFF", False)]:  # fmt: skip
            clean_env.setenv(env_name(name), raw)
            assert getattr(Settings.from_env(), name) is on, (name, raw)
        clean_env.setenv(env_name(name), "")
        assert getattr(Settings.from_env(), name) is getattr(defaults, name), name
        clean_env.setenv(env_name(name), "maybe")
        with pytest.raises(ValidationError, match=name):
            Settings.from_env()
        clean_env.delenv(env_name(name))


def test_lists_are_comma_separated_in_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    for name in LISTS:
        clean_env.setenv(env_name(name), " a.example, b.example:8080 ,,")
        assert getattr(Settings.from_env(), name) == ("a.example", "b.example:8080"), name
        clean_env.delenv(env_name(name))
    assert Settings(allowed_hosts=("c.example",)).allowed_hosts == ("c.example",)


def test_settings_made_in_code_do_not_read_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TURNWISE_PORT", "9001")
    clean_env.setenv("TURNWISE_MAX_WAIT_SECONDS", "5")
    assert Settings.from_env().port == 9001
    made = Settings(max_wait_seconds=1.5)
    assert (made.port, made.max_wait_seconds) == (8000, 1.5)


def test_the_secrets_do_not_show_in_the_settings_printed(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TURNWISE_BOOTSTRAP_TOKEN", "t0ken")
    clean_env.setenv("TURNWISE_VAPID_PRIVATE_KEY", "k3y")
    settings = Settings.from_env()
    assert "t0ken" not in repr(settings)
    assert "k3y" not in repr(settings)
    assert settings.bootstrap_token is not None
    assert settings.bootstrap_token.get_secret_value() == "t0ken"
