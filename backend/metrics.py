"""Prometheus metrics (`/metrics`): request and operation latency, pending-action counters (by kind,
and the clarification-only ones), live gauges, and the statements and transactions this process sent
to the database.

With `turnwise serve --workers N` the server runs prometheus-client's multiprocess mode
(PROMETHEUS_MULTIPROC_DIR, set by the command before the workers start): any worker's `/metrics` then
reports the sum over all workers (gauges of live workers only).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client import REGISTRY as DEFAULT_REGISTRY
from sqlalchemy import event
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from backend.db.engine import Database

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUESTS = Histogram(
    "turnwise_http_request_seconds",
    "HTTP requests by route, method and status class, from the first byte in to the last byte out.",
    ["route", "method", "status"],
    buckets=LATENCY_BUCKETS,
)
OPERATIONS = Histogram(
    "turnwise_graphql_operation_seconds",
    "Executed GraphQL queries and mutations by type and root field (validated documents only).",
    ["type", "field"],
    buckets=LATENCY_BUCKETS,
)
# Clarifications only (their names say so); the pending-action counters below count every kind.
ASKS = Counter("turnwise_clarification_asks", "askClarification calls that yielded ClarificationAsked.")
LIVE_ANSWERS = Counter(
    "turnwise_clarification_live_answers", "Answers and skips delivered to a waiting agent on its live wait."
)
DETACHES = Counter("turnwise_clarification_detaches", "Waits that ended with ClarificationDetached.")
CONFLICTS = Counter(
    "turnwise_clarification_conflicts", "respondToClarification conflicts by reason.", ["reason"]
)
PENDING_ASKS = Counter(
    "turnwise_pending_action_asks",
    "Asks that yielded Asked (askClarification, askPermission), by kind of pending action.",
    ["kind"],
)
PENDING_LIVE_ANSWERS = Counter(
    "turnwise_pending_action_live_answers",
    "Responses (answers, skips, decisions) delivered to a waiting agent on its live wait, by kind.",
    ["kind"],
)
PENDING_DETACHES = Counter(
    "turnwise_pending_action_detaches", "Waits that ended detached, by kind of pending action.", ["kind"]
)
PENDING_CONFLICTS = Counter(
    "turnwise_pending_action_conflicts",
    "Responds refused by the pending action's state (respondToClarification, respondToPermission), "
    "by kind and reason.",
    ["kind", "reason"],
)
RESUME_OUTCOMES = Counter(
    "turnwise_resume_outcomes",
    "Responds delivered beyond the live wait, by kind of pending action: resumed (a detached answer "
    "reached its agent), retryable_failure / final_failure (ClarificationDeliveryFailed, live hand-off "
    "or resume).",
    ["kind", "outcome"],
)
LIVE_WAITERS = Gauge(
    "turnwise_live_waiters",
    "Agents waiting on askClarification or askPermission right now, by kind of pending action.",
    ["kind"],
    multiprocess_mode="livesum",
)
SUBSCRIBERS = Gauge(
    "turnwise_subscribers",
    "Open subscriptions of clients (pendingActionChanged, sessionEvents, taskSummaryChanged).",
    ["subscription"],
    multiprocess_mode="livesum",
)
BUS_CONNECTED = Gauge(
    "turnwise_bus_connected",
    "1 while the event bus is connected, 0 while it reconnects (the lowest over workers).",
    multiprocess_mode="livemin",
)
BUS_RECONNECTS = Counter(
    "turnwise_bus_reconnects", "Times the event bus was lost and came back (resubscribed, snapshots sent)."
)
DB_UP = Gauge(
    "turnwise_db_up",
    "1 while the database answers, 0 from a failed connect or a lost connection until one succeeds "
    "(the lowest over workers).",
    multiprocess_mode="livemin",
)
DB_CONNECTION_FAILURES = Counter(
    "turnwise_db_connection_failures",
    "Connects that failed, statements whose connection was lost or got no reply, and pooled "
    "connections found closed by the server (replaced before use).",
)
DB_STATEMENTS = Counter("turnwise_db_statements", "SQL statements sent to the database (not BEGIN/COMMIT).")
DB_TRANSACTIONS = Counter(
    "turnwise_db_transactions",
    "Database transactions ended (commit, rollback) and pings of idle pooled connections (ping).",
    ["outcome"],
)

_ROUTES = frozenset({"/graphql", "/healthz", "/readyz", "/metrics"})


def instrument(db: Database) -> None:
    """Count the database's statements, transactions and idle-connection pings.

    Statements are counted by the database itself (`Database.statements`, one event listener) and
    added to `turnwise_db_statements_total` when a transaction ends and before every scrape: one
    counter update per transaction instead of one per statement."""
    commits = DB_TRANSACTIONS.labels("commit")
    rollbacks = DB_TRANSACTIONS.labels("rollback")
    sync_engine = db.engine.sync_engine
    _instrumented.add(db)

    def count_commit(_conn: Any) -> None:
        commits.inc()
        _report_statements(db)

    def count_rollback(_conn: Any) -> None:
        rollbacks.inc()
        _report_statements(db)

    DB_UP.set(1 if db.health.up else 0)
    db.health.listeners.append(lambda up: DB_UP.set(1 if up else 0))
    db.health.failure_listeners.append(DB_CONNECTION_FAILURES.inc)
    event.listen(sync_engine, "commit", count_commit)
    event.listen(sync_engine, "rollback", count_rollback)
    if not db.is_sqlite:
        # A ping of an idle pooled connection is one more round trip, and PostgreSQL counts it as a
        # transaction.
        db.ping_listeners.append(DB_TRANSACTIONS.labels("ping").inc)


_instrumented: weakref.WeakSet[Database] = weakref.WeakSet()


def _report_statements(db: Database) -> None:
    counted = db.statements - db.begins
    if counted > db.statements_reported:
        DB_STATEMENTS.inc(counted - db.statements_reported)
        db.statements_reported = counted


# Blocked time (needs you): what waits now, refreshed from the database before each scrape (the same
# value on every worker: the most recent one is reported), and how long each ask waited for its decision.
PENDING_WAITING = Gauge(
    "turnwise_pending_actions_waiting",
    "Active pending actions (current turn, live session) waiting for a person, by kind.",
    ["kind"],
    multiprocess_mode="livemostrecent",
)
PENDING_OLDEST_SECONDS = Gauge(
    "turnwise_pending_action_oldest_seconds",
    "How long the oldest active pending action of each kind has waited (0 when none waits).",
    ["kind"],
    multiprocess_mode="livemostrecent",
)
WAIT_BUCKETS = (
    1.0,
    5.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    43200.0,
    86400.0,
)
DECISION_SECONDS = Histogram(
    "turnwise_pending_action_decision_seconds",
    "From an ask to its decision, by kind and outcome: a person's (ANSWERED, SKIPPED, ALLOWED, DENIED) "
    "and a cancel (CANCELLED); a rule's allow and an expiry or supersede with the session are not "
    "counted.",
    ["kind", "outcome"],
    buckets=WAIT_BUCKETS,
)


def observe_decision(kind: str, outcome: str, asked_at: dt.datetime) -> None:
    """One ask decided now."""
    waited = (dt.datetime.now(dt.UTC) - asked_at).total_seconds()
    DECISION_SECONDS.labels(kind, outcome).observe(max(0.0, waited))


LIVE_DIRECT_SENDS = Counter(
    "turnwise_live_direct_sends",
    "Subscription results sent straight to an idle subscription's connection (a change fanned out), "
    "without waking the subscription.",
)


class Tally:
    """A count kept as a plain integer where it grows (one change can add ten thousand at once) and
    added to its counter once that burst is over (the event loop's next turn), and before a scrape."""

    __slots__ = ("count", "counter", "reported", "scheduled")

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.count = 0
        self.reported = 0
        self.scheduled = False

    def add(self) -> None:
        self.count += 1
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.report)

    def report(self) -> None:
        self.scheduled = False
        if self.count > self.reported:
            self.counter.inc(self.count - self.reported)
            self.reported = self.count


DIRECT_SENDS = Tally(LIVE_DIRECT_SENDS)


def exposition() -> tuple[bytes, str]:
    """The text format of every metric: this process's, or all workers' in multiprocess mode."""
    for db in list(_instrumented):
        _report_statements(db)
    DIRECT_SENDS.report()
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(DEFAULT_REGISTRY), CONTENT_TYPE_LATEST


class RequestMetrics:
    """ASGI middleware timing HTTP requests (WebSocket connections are not requests)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            path = scope.get("path", "")
            route = path if path in _ROUTES else "other"
            REQUESTS.labels(route, scope.get("method", ""), f"{status // 100}xx").observe(
                time.perf_counter() - started
            )
