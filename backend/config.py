"""Settings from the environment (TURNWISE_*) and the command line; every default works embedded.

One syntax for every switch, pydantic's: 1/0, true/false, yes/no, on/off (any case). An empty variable
counts as unset. Lists are comma-separated."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import platformdirs
from pydantic import Field, SecretStr, TypeAdapter, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from typing_extensions import override

ENV_PREFIX = "TURNWISE_"


def default_database_url() -> str:
    data = Path(platformdirs.user_data_dir("turnwise"))
    return f"sqlite+aiosqlite:///{data / 'turnwise.db'}"


def env_name(field: str) -> str:
    """The variable that sets a field of `Settings`."""
    return f"{ENV_PREFIX}{field.upper()}"


_BOOL = TypeAdapter(bool)


def switch(raw: str | None, default: bool) -> bool:
    """A switch's value, read as `Settings` reads it: unset or empty is `default`."""
    return default if raw is None or not raw.strip() else _BOOL.validate_python(raw.strip())


def env_switch(name: str) -> bool:
    """A switch that is on unless its variable turns it off (read outside `Settings`, by code that
    runs before any settings exist)."""
    try:
        return switch(os.environ.get(name), True)
    except ValidationError:
        raise ValueError(f"{name}: input should be a valid boolean (got {os.environ[name]!r})") from None


def problems(error: ValidationError) -> list[str]:
    """One line per bad variable of a `Settings.from_env` that failed, naming it."""
    lines = []
    for e in error.errors(include_url=False):
        name = env_name(str(e["loc"][0])) if e["loc"] else ENV_PREFIX + "*"
        # A message of our own names the variable and the value already.
        lines.append(e["msg"] if e["msg"].startswith(name) else f"{name}: {e['msg']} (got {e['input']!r})")
    return lines


# Comma-separated in the environment (not JSON, pydantic-settings' default for a sequence).
CommaList = Annotated[tuple[str, ...], NoDecode]


# TURNWISE_DB_POOLER: the connection pooler between Turnwise and PostgreSQL, when there is one.
POOLERS = ("pgbouncer",)


def db_fast_path(raw: str | None) -> bool:
    """TURNWISE_DB_FAST_PATH: on unless it says off."""
    return switch(raw, True)


def db_pooler(raw: str | None) -> str | None:
    """TURNWISE_DB_POOLER: None (unset or empty) or "pgbouncer"; anything else is a ValueError."""
    value = (raw or "").strip().lower()
    if not value:
        return None
    if value not in POOLERS:
        raise ValueError(
            f"TURNWISE_DB_POOLER must be one of {', '.join(POOLERS)} or unset (got {raw!r}): "
            "pgbouncer means PgBouncer in pool_mode = transaction between Turnwise and PostgreSQL"
        )
    return value


class Settings(BaseSettings):
    host: str = "127.0.0.1"
    port: int = 8000
    database_url: str = Field(default_factory=default_database_url)
    broadcast_url: str = "memory://"
    # Prefix of every channel at the broker, so deployments sharing one Redis or PostgreSQL stay apart.
    bus_namespace: str = ""
    bootstrap_token: SecretStr | None = None
    allowed_origins: CommaList = ()
    # Host names (optionally host:port) that browser requests to /mcp may address, besides the loopback
    # names and `host`: a page whose name was rebound to this machine addresses a foreign one.
    allowed_hosts: CommaList = ()
    # Clarification timing (seconds); the originals were hours, tests shorten them.
    max_wait_seconds: float = 7200.0
    live_confirmation_seconds: float = 300.0
    persistence_seconds: float = 30.0
    dispatch_seconds: float = 30.0
    watchdog_seconds: float = 15.0
    # Live waiters' server instances beat this often; a remote waiter is gone after 3 missed beats.
    heartbeat_seconds: float = 5.0
    # The event bus: a heartbeat every bus_ping_seconds, lost after bus_silence_seconds without one;
    # a publish outlasting bus_publish_seconds fails. A live waiter in another process acknowledges
    # receipt of a hand-off within handoff_receipt_seconds, or the responder restores the claim.
    bus_ping_seconds: float = 1.0
    bus_silence_seconds: float = 3.0
    bus_publish_seconds: float = 2.0
    handoff_receipt_seconds: float = 3.0
    subscriptions_per_connection: int = 32
    max_query_depth: int = 12
    max_query_bytes: int = 64_000
    fault_points: CommaList = ()
    webhook_url: str | None = None
    # How detached answers reach agents: channel (agentPrompts) | webhook | scripted (tests).
    executor: str = "channel"
    scripted_outcomes: CommaList = ("accepted",)
    scripted_log: str | None = None
    demo: bool = False
    # Server processes behind one port (`turnwise serve --workers N`): PostgreSQL and a shared bus only.
    workers: int = 1
    # PostgreSQL connections each server process keeps open (and up to half as many more under a
    # burst, closed again after use): a connection opened per transaction costs more than the
    # transaction. Each worker has its own pool; PostgreSQL's max_connections must cover them all.
    db_pool_size: int = 20
    # The database fast path (backend/db/fast_path.py): TURNWISE_DB_FAST_PATH=0 runs every statement
    # through plain SQLAlchemy instead.
    db_fast_path: bool = True
    # TURNWISE_DB_POOLER=pgbouncer: PostgreSQL through PgBouncer in transaction pooling (no named
    # prepared statements, asyncpg's statement caches off). None: connected directly.
    db_pooler: str | None = None
    # While the database is gone or frozen, a connect and each statement give up after these, so an
    # operation fails within about 5 s with a retryable error instead of hanging.
    db_connect_timeout_seconds: float = 2.0
    db_statement_timeout_seconds: float = 2.0
    # Migrations on a connection of their own (a direct one, when the service goes through PgBouncer);
    # unset: the service's own URL.
    migrate_database_url: str | None = None
    # uvicorn's per-request access log (TURNWISE_ACCESS_LOG=1); off by default, it costs on the hot path.
    access_log: bool = False
    # permessage-deflate on WebSockets: off, since an operation's messages are small and compressing
    # each one costs both ends more CPU than it saves on the wire (TURNWISE_WS_COMPRESSION=1 turns it on).
    ws_compression: bool = False
    # Strawberry's undocumented names (backend/api/strawberry_adapter.py, under its canary):
    # TURNWISE_WS_ADAPTER=0 serves WebSockets with Strawberry's own handler, unchanged.
    ws_adapter: bool = True
    # graphql-core's executor internals (backend/api/graphql_core_adapter.py, under its canary):
    # TURNWISE_GRAPHQL_CORE_ADAPTER=0 executes with Strawberry's own executor, unchanged.
    graphql_core_adapter: bool = True
    # The MCP SDK's undocumented names (backend/api/mcp_adapter.py, under its canary):
    # TURNWISE_MCP_ADAPTER=0 leaves tool calls to the SDK's own handler (an unknown tool: a tool error).
    mcp_adapter: bool = True
    # `/mcp` loads the MCP SDK on its first request (backend/api/mcp_mount.py), sparing every other
    # process its import; TURNWISE_MCP_AT_START=1 builds it during startup instead, before readiness,
    # so no MCP request waits for it (`bench startup` measures both).
    mcp_at_start: bool = False
    # Reach (backend/services/reach/): a person is told of a pending action still open after
    # notify_after_seconds, by Web Push and by their chat or mail channels; a failing send is retried
    # with backoff (notify_backoff_seconds, doubling to a minute) for notify_retry_seconds. An ask
    # that wrote outbox rows wakes every process's worker for their due time (through the bus); an
    # idle worker otherwise looks at the outbox only every notify_idle_seconds, and every
    # notify_poll_seconds while delivered pushes await their close (or after a failed pass); one
    # send may take notify_send_seconds. Finished outbox rows are deleted after notify_keep_days.
    # public_url makes the links in messages.
    notify_after_seconds: float = 30.0
    notify_retry_seconds: float = 600.0
    notify_backoff_seconds: float = 1.0
    notify_poll_seconds: float = 0.5
    notify_idle_seconds: float = 30.0
    notify_send_seconds: float = 10.0
    notify_keep_days: float = 7.0
    public_url: str | None = None
    vapid_private_key: SecretStr | None = None
    vapid_subject: str = "mailto:turnwise@localhost"
    # Outbound targets (push endpoints, webhook, chat and mail hosts) that may resolve to loopback,
    # private or link-local addresses (host or host:port); none by default: no open relay.
    outbound_allowed_hosts: CommaList = ()

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True)

    @classmethod
    @override
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Settings made in code (tests, embedding) are their keywords over the defaults, whatever the
        # process's environment holds; `from_env` is where the environment comes in.
        return (init_settings,)

    @classmethod
    def from_env(cls) -> Settings:
        """The settings the TURNWISE_* variables make; a bad value is a `ValidationError` whose
        locations are field names (`env_name` makes the variable of each)."""
        return cls(**EnvSettingsSource(cls)())

    @field_validator(
        "allowed_origins",
        "allowed_hosts",
        "fault_points",
        "scripted_outcomes",
        "outbound_allowed_hosts",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @field_validator("db_pooler", mode="before")
    @classmethod
    def _pooler(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            try:
                return db_pooler(value)
            except ValueError as exc:
                # Its own message, without pydantic's "Value error, " before it.
                raise PydanticCustomError("db_pooler", str(exc)) from None
        return value

    def scale_out_problem(self) -> str | None:
        """Why these settings cannot run `workers` processes, or None when they can."""
        if self.workers < 1:
            return f"--workers must be at least 1 (got {self.workers})"
        if self.db_pool_size < 1:
            return f"TURNWISE_DB_POOL_SIZE must be at least 1 (got {self.db_pool_size})"
        if self.db_pooler is not None and self.database_url.startswith("sqlite"):
            return f"TURNWISE_DB_POOLER={self.db_pooler} needs a postgresql+asyncpg:// TURNWISE_DATABASE_URL"
        if self.workers == 1:
            return None
        if self.database_url.startswith("sqlite"):
            return (
                f"--workers {self.workers} needs PostgreSQL: SQLite serializes every writer on one file "
                "and its processes cannot share live waiters; run one worker, or use a postgresql+asyncpg:// "
                "TURNWISE_DATABASE_URL"
            )
        if self.broadcast_url.startswith("memory://"):
            return (
                f"--workers {self.workers} needs a shared bus: memory:// reaches only its own process, so an "
                "answer could not reach an agent waiting on another worker; set TURNWISE_BROADCAST_URL to "
                "redis://... or postgres://..."
            )
        return None
