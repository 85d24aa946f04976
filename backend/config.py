"""Settings from the environment (TURNWISE_*) and the command line; every default works embedded."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import platformdirs


def default_database_url() -> str:
    data = Path(platformdirs.user_data_dir("turnwise"))
    return f"sqlite+aiosqlite:///{data / 'turnwise.db'}"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _switch(name: str) -> bool:
    """On unless the variable is "0", "false" or "no" (any case)."""
    return (os.environ.get(name) or "").strip().lower() not in ("0", "false", "no")


def _list(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return tuple(p.strip() for p in raw.split(",") if p.strip())


# TURNWISE_DB_POOLER: the connection pooler between Turnwise and PostgreSQL, when there is one.
POOLERS = ("pgbouncer",)


def db_fast_path(raw: str | None) -> bool:
    """TURNWISE_DB_FAST_PATH: on unless "0", "false" or "no" (any case)."""
    return (raw or "").strip().lower() not in ("0", "false", "no")


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


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    database_url: str = field(default_factory=default_database_url)
    broadcast_url: str = "memory://"
    # Prefix of every channel at the broker, so deployments sharing one Redis or PostgreSQL stay apart.
    bus_namespace: str = ""
    bootstrap_token: str | None = None
    allowed_origins: tuple[str, ...] = ()
    # Host names (optionally host:port) that browser requests to /mcp may address, besides the loopback
    # names and `host`: a page whose name was rebound to this machine addresses a foreign one.
    allowed_hosts: tuple[str, ...] = ()
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
    fault_points: tuple[str, ...] = ()
    webhook_url: str | None = None
    # How detached answers reach agents: channel (agentPrompts) | webhook | scripted (tests).
    executor: str = "channel"
    scripted_outcomes: tuple[str, ...] = ("accepted",)
    scripted_log: str | None = None
    demo: bool = False
    # Server processes behind one port (`turnwise serve --workers N`): PostgreSQL and a shared bus only.
    workers: int = 1
    # PostgreSQL connections each server process keeps open (and up to half as many more under a
    # burst, closed again after use): a connection opened per transaction costs more than the
    # transaction. Each worker has its own pool; PostgreSQL's max_connections must cover them all.
    db_pool_size: int = 20
    # The database fast path (backend/db/prepared.py): TURNWISE_DB_FAST_PATH=0 runs every statement
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
    # Reach (backend/services/reach.py): a person is told of a pending action still open after
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
    vapid_private_key: str | None = None
    vapid_subject: str = "mailto:turnwise@localhost"
    # Outbound targets (push endpoints, webhook, chat and mail hosts) that may resolve to loopback,
    # private or link-local addresses (host or host:port); none by default: no open relay.
    outbound_allowed_hosts: tuple[str, ...] = ()

    @classmethod
    def from_env(cls) -> Settings:
        base = cls()
        return replace(
            base,
            host=os.environ.get("TURNWISE_HOST", base.host),
            port=_int("TURNWISE_PORT", base.port),
            database_url=os.environ.get("TURNWISE_DATABASE_URL") or base.database_url,
            broadcast_url=os.environ.get("TURNWISE_BROADCAST_URL") or base.broadcast_url,
            bus_namespace=os.environ.get("TURNWISE_BUS_NAMESPACE", base.bus_namespace),
            bootstrap_token=os.environ.get("TURNWISE_BOOTSTRAP_TOKEN") or None,
            allowed_origins=_list("TURNWISE_ALLOWED_ORIGINS", base.allowed_origins),
            allowed_hosts=_list("TURNWISE_ALLOWED_HOSTS", base.allowed_hosts),
            notify_after_seconds=_float("TURNWISE_NOTIFY_AFTER_SECONDS", base.notify_after_seconds),
            notify_retry_seconds=_float("TURNWISE_NOTIFY_RETRY_SECONDS", base.notify_retry_seconds),
            notify_backoff_seconds=_float("TURNWISE_NOTIFY_BACKOFF_SECONDS", base.notify_backoff_seconds),
            notify_poll_seconds=_float("TURNWISE_NOTIFY_POLL_SECONDS", base.notify_poll_seconds),
            notify_idle_seconds=_float("TURNWISE_NOTIFY_IDLE_SECONDS", base.notify_idle_seconds),
            notify_send_seconds=_float("TURNWISE_NOTIFY_SEND_SECONDS", base.notify_send_seconds),
            notify_keep_days=_float("TURNWISE_NOTIFY_KEEP_DAYS", base.notify_keep_days),
            public_url=os.environ.get("TURNWISE_PUBLIC_URL") or None,
            vapid_private_key=os.environ.get("TURNWISE_VAPID_PRIVATE_KEY") or None,
            vapid_subject=os.environ.get("TURNWISE_VAPID_SUBJECT") or base.vapid_subject,
            outbound_allowed_hosts=_list("TURNWISE_OUTBOUND_ALLOWED_HOSTS", base.outbound_allowed_hosts),
            max_wait_seconds=_float("TURNWISE_MAX_WAIT_SECONDS", base.max_wait_seconds),
            live_confirmation_seconds=_float(
                "TURNWISE_LIVE_CONFIRMATION_SECONDS", base.live_confirmation_seconds
            ),
            persistence_seconds=_float("TURNWISE_PERSISTENCE_SECONDS", base.persistence_seconds),
            dispatch_seconds=_float("TURNWISE_DISPATCH_SECONDS", base.dispatch_seconds),
            watchdog_seconds=_float("TURNWISE_WATCHDOG_SECONDS", base.watchdog_seconds),
            heartbeat_seconds=_float("TURNWISE_HEARTBEAT_SECONDS", base.heartbeat_seconds),
            bus_ping_seconds=_float("TURNWISE_BUS_PING_SECONDS", base.bus_ping_seconds),
            bus_silence_seconds=_float("TURNWISE_BUS_SILENCE_SECONDS", base.bus_silence_seconds),
            bus_publish_seconds=_float("TURNWISE_BUS_PUBLISH_SECONDS", base.bus_publish_seconds),
            handoff_receipt_seconds=_float("TURNWISE_HANDOFF_RECEIPT_SECONDS", base.handoff_receipt_seconds),
            subscriptions_per_connection=_int(
                "TURNWISE_SUBSCRIPTIONS_PER_CONNECTION", base.subscriptions_per_connection
            ),
            max_query_depth=_int("TURNWISE_MAX_QUERY_DEPTH", base.max_query_depth),
            max_query_bytes=_int("TURNWISE_MAX_QUERY_BYTES", base.max_query_bytes),
            fault_points=_list("TURNWISE_FAULT_POINTS", base.fault_points),
            webhook_url=os.environ.get("TURNWISE_WEBHOOK_URL") or None,
            executor=os.environ.get("TURNWISE_EXECUTOR") or base.executor,
            scripted_outcomes=_list("TURNWISE_SCRIPTED_OUTCOMES", base.scripted_outcomes),
            scripted_log=os.environ.get("TURNWISE_SCRIPTED_LOG") or None,
            workers=_int("TURNWISE_WORKERS", base.workers),
            db_pool_size=_int("TURNWISE_DB_POOL_SIZE", base.db_pool_size),
            db_fast_path=db_fast_path(os.environ.get("TURNWISE_DB_FAST_PATH")),
            db_pooler=db_pooler(os.environ.get("TURNWISE_DB_POOLER")),
            db_connect_timeout_seconds=_float(
                "TURNWISE_DB_CONNECT_TIMEOUT_SECONDS", base.db_connect_timeout_seconds
            ),
            db_statement_timeout_seconds=_float(
                "TURNWISE_DB_STATEMENT_TIMEOUT_SECONDS", base.db_statement_timeout_seconds
            ),
            migrate_database_url=os.environ.get("TURNWISE_MIGRATE_DATABASE_URL") or None,
            access_log=os.environ.get("TURNWISE_ACCESS_LOG", "") in ("1", "true", "yes"),
            ws_compression=os.environ.get("TURNWISE_WS_COMPRESSION", "") in ("1", "true", "yes"),
            ws_adapter=_switch("TURNWISE_WS_ADAPTER"),
            graphql_core_adapter=_switch("TURNWISE_GRAPHQL_CORE_ADAPTER"),
            mcp_adapter=_switch("TURNWISE_MCP_ADAPTER"),
        )

    def scale_out_problem(self) -> str | None:
        """Why these settings cannot run `workers` processes, or None when they can."""
        if self.workers < 1:
            return f"--workers must be at least 1 (got {self.workers})"
        if self.db_pool_size < 1:
            return f"TURNWISE_DB_POOL_SIZE must be at least 1 (got {self.db_pool_size})"
        if self.db_pooler is not None:
            try:
                db_pooler(self.db_pooler)
            except ValueError as exc:
                return str(exc)
            if self.database_url.startswith("sqlite"):
                return (
                    f"TURNWISE_DB_POOLER={self.db_pooler} needs a postgresql+asyncpg:// TURNWISE_DATABASE_URL"
                )
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
