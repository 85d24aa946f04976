"""The ask -> answer cycle end to end, against a real `turnwise serve` and against the floor server.

One cycle: an agent subscribes `askClarification` over its WebSocket -> `ClarificationAsked` -> a client
calls `respondToClarification` over keep-alive HTTP -> the agent receives `ClarificationAnswered` (and
the client its `ClarificationResponded`). The approval cycle is the same with `askPermission` ->
`respondToPermission(ALLOW)` -> `PermissionDecided`, on PostgreSQL beside the clarification cycle.
With 1 and 50 concurrent agents (one WebSocket each), on
PostgreSQL + Redis (1 and 2 workers) and on SQLite; the floor (`bench/floor.py`: Strawberry, Starlette,
uvicorn, asyncpg, three commits, no rules) runs in the same process of the bench on PostgreSQL. Beside
them, LangGraph in-process (`bench/langgraph_cycle.py`: a graph whose node calls `interrupt(question)`,
checkpointed by `AsyncPostgresSaver` on the same PostgreSQL; one cycle = run it on a new thread to the
interrupt, then resume it with the answer), its agents tasks of the bench's own process, with no
network. It needs the `bench` extra (`make bench` installs requirements-bench.lock); without it the run
is skipped, with a line that says how to install it.

Per run: cycles/s, ask p50/p99 (subscribe -> Asked), respond -> answered p50/p99 (respond sent ->
Answered received by the agent), transactions and statements per cycle counted where they meet the
database (the server's own counters at `/metrics`: commits, rollbacks and connection pre-pings, and SQL
statements other than BEGIN; the floor counts the same way), with PostgreSQL's `pg_stat_database`
commits + rollbacks beside them as a cross-check (approximate: PostgreSQL reports an idle backend's
statistics up to 10 s late), and server CPU per cycle (`/proc/<pid>/stat` of the server and its
workers; for LangGraph, the bench process's own CPU: agents and graph in one). Then each Turnwise run's
cycles/s as a ratio to the floor's and to LangGraph's, and the targets; among them, at the largest
agent count, server CPU per cycle with 2 workers against 1 (at most 1.1x: adding a process costs
little), beside the 2 workers' cycles/s ratio (reported, no limit).

The runs serve side by side, so their PostgreSQL connections together must stay under the server's
`max_connections`. Before the first run the bench reads it (less the reserved connections, the client
connections already open in `pg_stat_activity`, and a margin of a tenth, at least 5, for its own short
connections and other clients) and gives every PostgreSQL server of the line-up the same pool, the
largest up to 20 (Turnwise's default `db_pool_size`) whose peaks all fit: the floor's asyncpg and
LangGraph's psycopg pools (`--pool-size`, `pool_size`: at most that many), and per Turnwise worker
process (`TURNWISE_DB_POOL_SIZE`; 2 workers, 2 pools) the pool, its overflow of half as many, the
migration's connection at startup, and the bus's LISTEN and publish connections when the bus is
PostgreSQL's (Redis here: none). The budget is printed in one line at the start and written to the
results. Pools of 9 do not throttle 50 agents: a server at 50 agents fills its pool (its transactions
wait for its CPU with their connection held), but a larger pool buys nothing on 2 cores: measured at
50 agents, pools of 9 ran as many cycles/s as pools of 20, the floor's and Turnwise's alike. Below 9
the bench prints a warning (raise `max_connections`, or run fewer at once with TURNWISE_CYCLE_ONLY),
and with no room for a pool of 1 it stops.

The runs compared at one agent count serve side by side and take turns: TURNWISE_CYCLE_ROUNDS (2)
windows each, so a drifting machine moves them alike. `python -m bench cycle`; TURNWISE_CYCLE_SECONDS
(seconds per window, default 4), TURNWISE_CYCLE_WARMUP (1), TURNWISE_CYCLE_AGENTS ("1,50"),
TURNWISE_CYCLE_ONLY (comma-separated: a whole label runs that run, any other text the runs whose
label contains it, e.g. "sqlite"; only the targets whose runs all ran), TURNWISE_CYCLE_PROFILE (a path
prefix: py-spy records the server over each measured window). Results: bench/results/cycle.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
from sqlalchemy.engine import make_url

from backend.client.transport import Connection, GraphQLRequestError, GraphQLTransport
from bench import langgraph_cycle
from bench.common import ServerProcess, pct, write_result
from tests.conftest import PG_URL
from tests.servers import drop_database, fresh_database

REDIS_URL = os.environ.get("TURNWISE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
ADMIN_TOKEN = "bench-cycle-admin-token"
CLK_TCK = os.sysconf("SC_CLK_TCK")

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!) {
  askClarification(sessionId: $s, questions: $q) {
    __typename
    ... on ClarificationAsked { bundle { pendingId } }
    ... on ClarificationAnswered { pendingId }
    ... on ClarificationDetached { pendingId } } }"""
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!) {
  respondToClarification(pendingId: $p, answers: $a) {
    __typename
    ... on ClarificationResponded { resumed }
    ... on ClarificationConflict { reason } } }"""
ANSWER = [{"questionId": "q1", "selectedOptionIds": ["q1_opt1"]}]
# The approval cycle: askPermission -> PermissionAsked -> respondToPermission(ALLOW) -> Decided.
ASK_PERMISSION = """subscription($s: ID!, $t: String!, $i: JSON!) {
  askPermission(sessionId: $s, toolName: $t, input: $i) {
    __typename
    ... on PermissionAsked { request { pendingId } }
    ... on PermissionDecided { pendingId }
    ... on PermissionDetached { pendingId } } }"""
RESPOND_PERMISSION = """mutation($p: ID!) {
  respondToPermission(pendingId: $p, behavior: ALLOW) {
    __typename
    ... on PermissionResponded { resumed }
    ... on ClarificationConflict { reason } } }"""


@dataclass(frozen=True)
class CycleKind:
    """The documents of one kind of ask -> answer cycle and what its outcomes are called."""

    field: str
    asked: str
    answered: str
    result_field: str
    responded: str

    def ask(self, index: int, n: int, session_id: str) -> tuple[str, dict[str, Any]]:
        if self.field == "askPermission":
            return ASK_PERMISSION, {
                "s": session_id,
                "t": "Bash",
                "i": {"command": f"make test # {index}.{n}"},
            }
        question = {"prompt": f"agent {index} cycle {n}?", "options": [{"label": "a"}, {"label": "b"}]}
        return ASK, {"s": session_id, "q": [question]}

    def pending_id(self, asked: dict[str, Any]) -> str:
        return str((asked.get("bundle") or asked.get("request") or {})["pendingId"])

    def respond(self, pending_id: str) -> tuple[str, dict[str, Any]]:
        if self.field == "askPermission":
            return RESPOND_PERMISSION, {"p": pending_id}
        return RESPOND, {"p": pending_id, "a": ANSWER}


CLARIFICATION_CYCLE = CycleKind(
    "askClarification",
    "ClarificationAsked",
    "ClarificationAnswered",
    "respondToClarification",
    "ClarificationResponded",
)
APPROVAL_CYCLE = CycleKind(
    "askPermission", "PermissionAsked", "PermissionDecided", "respondToPermission", "PermissionResponded"
)

CREATE_USER = "mutation($n: String!, $r: String!) { createUser(name: $n, role: $r) { id } }"
ISSUE = "mutation($u: ID!, $s: ID) { issueToken(userId: $u, sessionId: $s) { token } }"
CREATE_TASK = "mutation($t: String!) { createTask(title: $t) { id } }"
CREATE_SESSION = "mutation($task: ID!) { createSession(taskId: $task, isPrimary: true) { id } }"
SET_STATE = "mutation($s: ID!, $st: SessionState!) { setSessionState(sessionId: $s, state: $st) { id } }"
GRANT = "mutation($u: ID!, $t: ID!) { grantTask(userId: $u, taskId: $t) }"


# --- PostgreSQL connections ---------------------------------------------------------------------

# Each PostgreSQL server's pool when PostgreSQL has room for them all (Turnwise's default
# db_pool_size); smaller when it has not, with a warning below FAIR_POOL (at 50 agents on 2 cores,
# pools of 9 ran as many cycles/s as pools of 20).
POOL_SIZE = 20
FAIR_POOL = 9


def pg_bus(url: str) -> bool:
    """Is this bus PostgreSQL's (LISTEN/NOTIFY, backend/bus/postgres.py)?"""
    return url.split(":", 1)[0].split("+", 1)[0] in ("postgres", "postgresql")


def peak_connections(kind: str, dialect: str, workers: int, pool: int) -> int:
    """The most PostgreSQL connections a run of the line-up opens at once with pools of `pool`."""
    if dialect != "postgresql":
        return 0
    if kind != "turnwise":
        return pool  # the floor's asyncpg pool, LangGraph's psycopg pool: at most `pool`
    # Per worker (each its own): the pool and its overflow (backend/db/engine.py: half as many, at
    # least 1), the migration's own connection at startup (backend/db/migrate.py), and on a
    # PostgreSQL bus its LISTEN and publish connections.
    bus = 2 if pg_bus(broadcast_url(dialect)) else 0
    return workers * (pool + max(1, pool // 2) + 1 + bus)


@dataclass
class PoolBudget:
    """What PostgreSQL has room for, and the pool each server of the line-up gets from it."""

    max_connections: int = 0
    reserved: int = 0
    in_use: int = 0
    margin: int = 0
    pool: int = POOL_SIZE
    peaks: dict[str, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    warning: str | None = None

    @property
    def room(self) -> int:
        return self.max_connections - self.reserved - self.in_use - self.margin

    def line(self) -> str:
        if not self.peaks:
            return "PostgreSQL connections: no PostgreSQL run"
        each = ", ".join(
            f"{label} {peak}" + (f" ({n} x {peak // n})" if (n := self.workers.get(label, 1)) > 1 else "")
            for label, peak in self.peaks.items()
        )
        return (
            f"PostgreSQL connections: max_connections {self.max_connections} - reserved {self.reserved} "
            f"- in use {self.in_use} - margin {self.margin} = {self.room}; pools of {self.pool}, "
            f"at most per server: {each} (= {sum(self.peaks.values())})"
        )


async def pg_room() -> tuple[int, int, int]:
    """PostgreSQL's max_connections, the connections reserved for superusers (and, from 16, for
    pg_use_reserved_connections), and the client connections open now (not counting this one)."""
    url = make_url(PG_URL)
    conn = await asyncpg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, database="postgres"
    )
    try:
        row = await conn.fetchrow(
            "SELECT current_setting('max_connections')::int,"
            " current_setting('superuser_reserved_connections')::int"
            " + coalesce(current_setting('reserved_connections', true)::int, 0),"
            " (SELECT count(*) FROM pg_stat_activity"
            "  WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())::int"
        )
        return int(row[0]), int(row[1]), int(row[2])
    finally:
        await conn.close()


async def pool_budget(lineup: list[tuple[str, str, str, int]]) -> PoolBudget:
    """The largest pool up to POOL_SIZE that every (label, kind, dialect, workers) of the line-up can
    have at once within PostgreSQL's free connections, less a margin; a warning below FAIR_POOL."""
    pg = [run for run in lineup if run[2] == "postgresql"]
    if not pg:
        return PoolBudget()
    max_connections, reserved, in_use = await pg_room()
    # The margin: the bench's own short connections (creating, migrating and dropping databases,
    # reading pg_stat_database), and clients that connect after the count.
    budget = PoolBudget(max_connections, reserved, in_use, max(5, max_connections // 10))

    def peaks(pool: int) -> dict[str, int]:
        return {label: peak_connections(kind, dialect, workers, pool) for label, kind, dialect, workers in pg}

    budget.pool = next((p for p in range(POOL_SIZE, 0, -1) if sum(peaks(p).values()) <= budget.room), 0)
    if not budget.pool:
        raise RuntimeError(
            f"PostgreSQL has room for {budget.room} connections (max_connections {max_connections} - "
            f"reserved {reserved} - in use {in_use} - margin {budget.margin}): too few for "
            f"{len(pg)} servers even with pools of 1 ({sum(peaks(1).values())}); raise max_connections "
            "or run fewer at once (TURNWISE_CYCLE_ONLY)"
        )
    budget.peaks = peaks(budget.pool)
    budget.workers = {label: workers for label, _, _, workers in pg}
    if budget.pool < FAIR_POOL:
        budget.warning = (
            f"WARNING: pools of {budget.pool} (< {FAIR_POOL}): PostgreSQL has room for only {budget.room} "
            f"connections, so at 50 agents the servers may wait for a connection and the figures may "
            "understate them; raise max_connections, or run fewer at once (TURNWISE_CYCLE_ONLY)"
        )
    return budget


# --- servers ------------------------------------------------------------------------------------


@dataclass
class Process(ServerProcess):
    """A server under test: `turnwise serve` or the floor, with the database it serves."""

    database_url: str = ""

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process and every descendant (the workers)."""
        assert self.proc is not None
        pids = [self.proc.pid]
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry.name))
        total = 0.0
        while pids:
            pid = pids.pop()
            pids.extend(children.get(pid, []))
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        return total

    async def counters(self) -> dict[str, float]:
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{self.base_url}/metrics", timeout=5)).text
        found: dict[str, float] = {}
        for name in ("turnwise_db_statements_total", "turnwise_db_transactions_total"):
            values = [float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
            if values:
                found[name] = sum(values)
        pings = re.findall(r'^turnwise_db_transactions_total\{outcome="ping"\} (\S+)$', text, re.M)
        if pings:
            found["pings"] = float(pings[0])
        return found


async def pg_transactions(database_url: str) -> int:
    """Commits + rollbacks of the database, read from another database so we do not count ourselves."""
    url = make_url(database_url)
    admin = await asyncpg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, database="postgres"
    )
    try:
        value = await admin.fetchval(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", url.database
        )
        return int(value)
    finally:
        await admin.close()


def postgres_cpu_seconds() -> float:
    """User + system CPU of every PostgreSQL process of this machine (backends, WAL writer,
    checkpointer, ...) and of those that have ended (a pool's overflow connections come and go: the
    postmaster's reaped-children time keeps theirs): the database's part of a window, when the runs
    take turns and the other servers idle. 0.0 where PostgreSQL runs elsewhere (nothing named
    postgres here)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                head, _, rest = (entry / "stat").read_text().rpartition(")")
                if head.split("(", 1)[1] != "postgres":
                    continue
                fields = rest.split()
                total += (int(fields[11]) + int(fields[12])) / CLK_TCK
                if (Path("/proc") / fields[1] / "comm").read_text().strip() != "postgres":
                    # The postmaster (its parent is not PostgreSQL's): its ended children's time.
                    total += (int(fields[13]) + int(fields[14])) / CLK_TCK
    return total


async def message_updates(database_url: str) -> tuple[int, int] | None:
    """(updates, heap-only updates) of Turnwise's message rows in this database so far, as
    PostgreSQL counts them (`pg_stat_user_tables`; flushed at most once a second); None without
    the table (the floor, LangGraph)."""
    url = make_url(database_url)
    conn = await asyncpg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, database=url.database
    )
    try:
        row = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'task_session_messages'"
        )
        return None if row is None else (int(row[0]), int(row[1]))
    finally:
        await conn.close()


class WireError(RuntimeError):
    """A cycle that did not go as the protocol says."""


# --- the cycle ----------------------------------------------------------------------------------


@dataclass
class Phase:
    stop_at: float = 0.0
    record: bool = False
    cycles: int = 0
    errors: list[str] = field(default_factory=list)
    ask: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)

    def absorb(self, window: Phase) -> None:
        """Add a measured window's cycles, errors and latencies to this run's."""
        self.cycles += window.cycles
        self.errors += window.errors
        self.ask += window.ask
        self.answered += window.answered


async def run_phase(
    queues: list[asyncio.Queue[Phase]], tasks: list[asyncio.Task[None]], phase: Phase
) -> float:
    """Hand every agent the phase and wait until each has finished it; its length in seconds. An agent
    that died raises its error here."""
    began = time.monotonic()
    for q in queues:
        q.put_nowait(phase)
    joined = asyncio.ensure_future(asyncio.gather(*(q.join() for q in queues)))
    watched: list[asyncio.Future[Any]] = [joined, *tasks]
    done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    if joined not in done:
        joined.cancel()
        for task in done:
            task.result()  # an agent died: raise its error
        raise RuntimeError("an agent stopped")
    return time.monotonic() - began


def timing(phase: Phase, elapsed: float) -> dict[str, Any]:
    """cycles/s and the latency percentiles of a run's recorded windows."""
    return {
        "cycles": phase.cycles,
        "cycles_per_s": round(phase.cycles / elapsed, 1) if elapsed else 0.0,
        "ask_p50_ms": ms(pct(phase.ask, 50)) if phase.ask else None,
        "ask_p99_ms": ms(pct(phase.ask, 99)) if phase.ask else None,
        "answered_p50_ms": ms(pct(phase.answered, 50)) if phase.answered else None,
        "answered_p99_ms": ms(pct(phase.answered, 99)) if phase.answered else None,
    }


async def agent(
    index: int,
    server: Process,
    token: str,
    session_id: str,
    responder: GraphQLTransport,
    phases: asyncio.Queue[Phase],
    cycle: CycleKind = CLARIFICATION_CYCLE,
) -> None:
    ws_url = server.base_url.replace("http", "ws", 1) + "/graphql"
    socket = await Connection.open(ws_url, token or None)
    n = 0
    try:
        while (phase := await phases.get()).stop_at:
            while time.monotonic() < phase.stop_at:
                n += 1
                try:
                    started = time.perf_counter()
                    sub = await socket.subscribe(*cycle.ask(index, n, session_id))
                    asked = (await sub.next(timeout=30))[cycle.field]
                    asked_at = time.perf_counter()
                    if asked["__typename"] != cycle.asked:
                        raise WireError(f"expected {cycle.asked}, got {asked}")
                    pending_id = cycle.pending_id(asked)
                    respond = asyncio.create_task(responder.execute(*cycle.respond(pending_id)))
                    outcome = (await sub.next(timeout=30))[cycle.field]
                    answered_at = time.perf_counter()
                    result = (await respond)[cycle.result_field]
                    if outcome["__typename"] != cycle.answered or result["__typename"] != cycle.responded:
                        raise WireError(f"cycle ended with {outcome} / {result}")
                except (
                    WireError,
                    GraphQLRequestError,
                    StopAsyncIteration,
                    OSError,
                    TimeoutError,
                    httpx.HTTPError,
                ) as exc:
                    phase.errors.append(f"agent {index}: {exc}"[:300])
                    await socket.close()
                    socket = await Connection.open(ws_url, token or None)
                    continue
                if phase.record:
                    phase.cycles += 1
                    phase.ask.append(asked_at - started)
                    phase.answered.append(answered_at - asked_at)
            phases.task_done()
    finally:
        await socket.close()


async def turnwise_setup(server: Process, agents: int) -> tuple[list[tuple[str, str]], str]:
    """(session id, agent token) per agent and one user token granted every task."""
    admin = GraphQLTransport(server.base_url, ADMIN_TOKEN)
    try:
        user_id = (await admin.execute(CREATE_USER, {"n": "responder", "r": "user"}))["createUser"]["id"]
        user_token = (await admin.execute(ISSUE, {"u": user_id, "s": None}))["issueToken"]["token"]
        sessions = []
        for a in range(agents):
            task_id = (await admin.execute(CREATE_TASK, {"t": f"cycle task {a}"}))["createTask"]["id"]
            session_id = (await admin.execute(CREATE_SESSION, {"task": task_id}))["createSession"]["id"]
            await admin.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
            await admin.execute(GRANT, {"u": user_id, "t": task_id})
            agent_id = (await admin.execute(CREATE_USER, {"n": f"agent-{a}", "r": "agent"}))["createUser"][
                "id"
            ]
            token = (await admin.execute(ISSUE, {"u": agent_id, "s": session_id}))["issueToken"]["token"]
            sessions.append((session_id, token))
        return sessions, user_token
    finally:
        await admin.aclose()


def broadcast_url(dialect: str) -> str:
    """The bus of a Turnwise run: Redis beside PostgreSQL, in-process beside SQLite."""
    return REDIS_URL if dialect == "postgresql" else "memory://"


@contextlib.asynccontextmanager
async def serving(
    kind: str, dialect: str, workers: int, pool: int = POOL_SIZE, settings: dict[str, str] | None = None
) -> AsyncIterator[Process]:
    """A server of the line-up on a fresh database; on PostgreSQL with a pool of `pool` (per worker);
    `settings`: more environment for a Turnwise server (a speed switch turned off, say)."""
    # Another checkout's server (the baseline) migrates its database with its own migrations.
    own = BASELINE_CWD not in (settings or {})
    url = await asyncio.to_thread(functools.partial(fresh_database, dialect, migrated=own))
    if kind == "floor":
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        args = ["bench.floor", "--dsn", dsn, "--pool-size", str(pool)]
        server = Process("floor", args, {}, database_url=url)
    else:
        env = {
            "TURNWISE_BOOTSTRAP_TOKEN": ADMIN_TOKEN,
            "TURNWISE_DATABASE_URL": url,
            "TURNWISE_BROADCAST_URL": broadcast_url(dialect),
        }
        if dialect == "postgresql":
            env["TURNWISE_DB_POOL_SIZE"] = str(pool)
        env.update(settings or {})
        cwd = env.pop(BASELINE_CWD, None)
        args = ["backend.cli", "serve", *(["--workers", str(workers)] if workers > 1 else [])]
        # Another checkout runs on its own virtualenv where it has one (its own locked packages).
        own_python = Path(cwd or ".", ".venv", "bin", "python")
        python = str(own_python) if cwd and os.access(own_python, os.X_OK) else sys.executable
        server = Process("turnwise", args, env, database_url=url, cwd=cwd, python=python)
    try:
        await server.start()
        yield server
    finally:
        await server.stop()
        await asyncio.to_thread(drop_database, url)
        if dialect == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                await asyncio.to_thread(Path(f"{make_url(url).database}{suffix}").unlink, missing_ok=True)


class AgentTasks:
    """The agents of a run as tasks of this process, each fed phases through its queue."""

    queues: list[asyncio.Queue[Phase]]
    tasks: list[asyncio.Task[None]]

    async def stop(self) -> None:
        for q in self.queues:
            q.put_nowait(Phase())
        try:
            await asyncio.gather(*self.tasks)
        finally:
            await self.close()

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()


@dataclass
class Load(AgentTasks):
    """One server with its agents connected and warmed up, measured over one or more windows (the
    runs compared with each other take turns, window by window)."""

    server: Process
    dialect: str
    agents: int
    queues: list[asyncio.Queue[Phase]]
    tasks: list[asyncio.Task[None]]
    responder: GraphQLTransport
    windows: int = 0
    elapsed: float = 0.0
    cpu: float = 0.0
    recorded: Phase = field(default_factory=Phase)
    counted: dict[str, float] = field(default_factory=dict)
    pg_stat_before: float = 0.0
    pg_cpu: float = 0.0

    async def run(self, phase: Phase) -> float:
        return await run_phase(self.queues, self.tasks, phase)

    async def window(self, seconds: float) -> None:
        """One recorded window; its cycles, latencies, CPU and counters add to the load's."""
        c0, cpu0 = await self.server.counters(), self.server.cpu_seconds()
        pg0 = postgres_cpu_seconds()
        profiler = start_profiler(self.server, self.agents, seconds, self.windows)
        phase = Phase(stop_at=time.monotonic() + seconds, record=True)
        self.elapsed += await self.run(phase)
        self.pg_cpu += postgres_cpu_seconds() - pg0
        if profiler is not None:
            await asyncio.to_thread(profiler.wait)
        self.cpu += self.server.cpu_seconds() - cpu0
        c1 = await self.server.counters()
        for name in c0.keys() & c1.keys():
            self.counted[name] = self.counted.get(name, 0.0) + c1[name] - c0[name]
        self.windows += 1
        self.recorded.absorb(phase)

    async def close(self) -> None:
        await super().close()
        await self.responder.aclose()

    async def result(self) -> dict[str, Any]:
        phase, n = self.recorded, max(self.recorded.cycles, 1)
        x1 = await pg_stat_after_quiet(self.server, self.dialect)

        def per_cycle(name: str) -> float | None:
            return round(self.counted[name] / n, 2) if name in self.counted else None

        return {
            **timing(phase, self.elapsed),
            "windows": self.windows,
            "transactions_per_cycle": per_cycle("turnwise_db_transactions_total"),
            # Cross-check only: PostgreSQL flushes an idle backend's statistics up to 10 s late, and
            # this spans the other runs' windows too (a Turnwise server's heartbeats meanwhile).
            "pg_stat_transactions_per_cycle": (
                round((x1 - self.pg_stat_before) / n, 2) if self.dialect == "postgresql" else None
            ),
            "statements_per_cycle": per_cycle("turnwise_db_statements_total"),
            "of_which_pre_pings_per_cycle": per_cycle("pings"),
            "cpu_ms_per_cycle": round(self.cpu * 1000 / n, 2),
            **postgres_part(self.pg_cpu, n, self.dialect),
            **(await hot_share(self.server.database_url) if self.server.kind == "turnwise" else {}),
            "errors": len(phase.errors),
            "error_samples": phase.errors[:3],
        }


def postgres_part(seconds: float, cycles: int, dialect: str) -> dict[str, Any]:
    """PostgreSQL's CPU per cycle over the run's windows (None off PostgreSQL)."""
    return {"pg_cpu_ms_per_cycle": round(seconds * 1000 / cycles, 2) if dialect == "postgresql" else None}


async def hot_share(database_url: str) -> dict[str, Any]:
    """How many of the run's updates of message rows were heap-only (warm-up included)."""
    if not database_url.startswith("postgresql"):
        return {}
    counts = await message_updates(database_url)
    if counts is None or not counts[0]:
        return {"message_updates": None, "message_updates_hot": None}
    return {"message_updates": counts[0], "message_updates_hot": counts[1]}


async def pg_stat_after_quiet(server: Process, dialect: str) -> float:
    if dialect != "postgresql":
        await asyncio.sleep(1.2)  # the same pause on every dialect
        return 0.0
    return await pg_stat_after_quiet_url(server.database_url)


async def pg_stat_after_quiet_url(database_url: str) -> float:
    await analyze(database_url)
    await asyncio.sleep(1.2)  # PostgreSQL flushes backend statistics at most once a second
    return float(await pg_transactions(database_url))


async def analyze(database_url: str) -> None:
    """`ANALYZE` the run's database after its warm-up, as autovacuum does to a database in service.
    Each run's database is new: without it, the planner plans from statistics of empty tables, and
    every pooled connection keeps the generic plans it made of them until statistics change, which
    autovacuum does at a moment of its own choosing, within the measured windows or not. Every
    server of the line-up (the floor and LangGraph too) gets it, at the same point of its run.
    `TURNWISE_CYCLE_ANALYZE=0` leaves the statistics to autovacuum, as before."""
    if os.environ.get("TURNWISE_CYCLE_ANALYZE", "1") == "0":
        return
    url = make_url(database_url)
    conn = await asyncpg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, database=url.database
    )
    try:
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def open_load(
    server: Process, dialect: str, agents: int, warmup: float, cycle: CycleKind = CLARIFICATION_CYCLE
) -> Load:
    """Sessions and tokens made, every agent connected, and a warm-up window run (not recorded)."""
    if server.kind == "floor":
        sessions, user_token = [(f"session-{a}", "") for a in range(agents)], ""
    else:
        sessions, user_token = await turnwise_setup(server, agents)
    responder = GraphQLTransport(server.base_url, user_token or None)
    queues: list[asyncio.Queue[Phase]] = [asyncio.Queue() for _ in sessions]
    tasks = [
        asyncio.create_task(agent(i, server, token or "", session_id, responder, q, cycle))
        for i, ((session_id, token), q) in enumerate(zip(sessions, queues, strict=True))
    ]
    load = Load(server, dialect, agents, queues, tasks, responder)
    try:
        await load.run(Phase(stop_at=time.monotonic() + warmup))
        load.pg_stat_before = await pg_stat_after_quiet(server, dialect)
    except BaseException:
        await load.close()
        raise
    return load


def start_profiler(
    server: Process, agents: int, seconds: float, window: int
) -> subprocess.Popen[bytes] | None:
    """With TURNWISE_CYCLE_PROFILE=<prefix>, py-spy records the server over each measured window
    into <prefix>-<kind>-<dialect>-<agents>-w<workers>-<window>.txt (raw collapsed stacks)."""
    prefix = os.environ.get("TURNWISE_CYCLE_PROFILE")
    if not prefix or server.proc is None:
        return None
    dialect = "sqlite" if server.database_url.startswith("sqlite") else "pg"
    workers = server.args[server.args.index("--workers") + 1] if "--workers" in server.args else "1"
    other = "-baseline" if server.cwd else ""  # another checkout's server
    out = f"{prefix}-{server.kind}{other}-{dialect}-{agents}-w{workers}-{window}.txt"
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [
            str(spy),
            "record",
            "-p",
            str(server.proc.pid),
            "-d",
            str(max(1, round(seconds))),
            "-r",
            "250",
            "-f",
            "raw",
            "-o",
            out,
            "--subprocesses",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


# --- LangGraph in-process -----------------------------------------------------------------------


async def graph_agent(index: int, graph: Any, run_id: str, phases: asyncio.Queue[Phase]) -> None:
    """An agent of the LangGraph run: each cycle asks the same question as a Turnwise agent, on a new
    thread, and resumes the thread with the same answer."""
    failures: tuple[type[BaseException], ...] = (
        langgraph_cycle.CycleError,
        TimeoutError,
        OSError,
        *langgraph_cycle.database_errors(),
    )
    n = 0
    while (phase := await phases.get()).stop_at:
        while time.monotonic() < phase.stop_at:
            n += 1
            question = {"prompt": f"agent {index} cycle {n}?", "options": [{"label": "a"}, {"label": "b"}]}
            try:
                ask, answered = await langgraph_cycle.cycle(graph, f"{run_id}-{index}-{n}", question, ANSWER)
            except failures as exc:
                phase.errors.append(f"agent {index}: {exc}"[:300])
                continue
            if phase.record:
                phase.cycles += 1
                phase.ask.append(ask)
                phase.answered.append(answered)
        phases.task_done()


@contextlib.asynccontextmanager
async def graph_serving(pool: int = POOL_SIZE) -> AsyncIterator[tuple[str, Any]]:
    """(database URL, compiled graph): LangGraph's checkpointer on a fresh database of its own, on a
    pool of at most `pool` connections."""
    url = await asyncio.to_thread(fresh_database, "postgresql")
    try:
        conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        async with langgraph_cycle.compiled_graph(conninfo, pool_size=pool) as graph:
            yield url, graph
    finally:
        await asyncio.to_thread(drop_database, url)


@dataclass
class GraphLoad(AgentTasks):
    """The LangGraph run, measured like a `Load`: its agents are tasks of this process (no server), so
    its CPU is this process's over the window, and its transactions are PostgreSQL's count alone."""

    database_url: str
    agents: int
    queues: list[asyncio.Queue[Phase]]
    tasks: list[asyncio.Task[None]]
    windows: int = 0
    elapsed: float = 0.0
    cpu: float = 0.0
    recorded: Phase = field(default_factory=Phase)
    pg_stat_before: float = 0.0
    pg_cpu: float = 0.0

    async def window(self, seconds: float) -> None:
        cpu0, pg0 = time.process_time(), postgres_cpu_seconds()
        phase = Phase(stop_at=time.monotonic() + seconds, record=True)
        self.elapsed += await run_phase(self.queues, self.tasks, phase)
        self.pg_cpu += postgres_cpu_seconds() - pg0
        self.cpu += time.process_time() - cpu0
        self.windows += 1
        self.recorded.absorb(phase)

    async def result(self) -> dict[str, Any]:
        phase, n = self.recorded, max(self.recorded.cycles, 1)
        x1 = await pg_stat_after_quiet_url(self.database_url)
        return {
            **timing(phase, self.elapsed),
            "windows": self.windows,
            "transactions_per_cycle": None,  # no counters of its own: PostgreSQL's, beside
            "pg_stat_transactions_per_cycle": round((x1 - self.pg_stat_before) / n, 2),
            "statements_per_cycle": None,
            "of_which_pre_pings_per_cycle": None,
            "cpu_ms_per_cycle": round(self.cpu * 1000 / n, 2),
            "cpu_of": "the bench process (agents and graph in one)",
            **postgres_part(self.pg_cpu, n, "postgresql"),
            "errors": len(phase.errors),
            "error_samples": phase.errors[:3],
        }


async def open_graph_load(database_url: str, graph: Any, agents: int, warmup: float) -> GraphLoad:
    """Every agent started on the compiled graph, and a warm-up window run (not recorded)."""
    run_id = uuid.uuid4().hex[:8]
    queues: list[asyncio.Queue[Phase]] = [asyncio.Queue() for _ in range(agents)]
    tasks = [asyncio.create_task(graph_agent(i, graph, run_id, q)) for i, q in enumerate(queues)]
    load = GraphLoad(database_url, agents, queues, tasks)
    try:
        await run_phase(queues, tasks, Phase(stop_at=time.monotonic() + warmup))
        load.pg_stat_before = await pg_stat_after_quiet_url(database_url)
    except BaseException:
        await load.close()
        raise
    return load


Run = tuple[str, str, str, int, CycleKind, dict[str, str]]
# A run's setting that is no environment variable: the folder its server starts in.
BASELINE_CWD = "cwd"
RUNS: tuple[Run, ...] = (
    # (label, server kind, dialect, workers, cycle, settings); kind "langgraph" is in-process
    ("floor pg", "floor", "postgresql", 1, CLARIFICATION_CYCLE, {}),
    ("langgraph pg", "langgraph", "postgresql", 1, CLARIFICATION_CYCLE, {}),
    ("turnwise pg+redis", "turnwise", "postgresql", 1, CLARIFICATION_CYCLE, {}),
    ("turnwise pg+redis approvals", "turnwise", "postgresql", 1, APPROVAL_CYCLE, {}),
    ("turnwise pg+redis 2 workers", "turnwise", "postgresql", 2, CLARIFICATION_CYCLE, {}),
    ("turnwise sqlite", "turnwise", "sqlite", 1, CLARIFICATION_CYCLE, {}),
)


def baseline_runs(checkout: str) -> tuple[Run, ...]:
    """TURNWISE_CYCLE_BASELINE: another checkout of Turnwise (an earlier commit, say, made with `git
    worktree add`) whose server runs beside this one's in the same windows, from its own code and its
    own `.venv` (`make install` there) or else this environment's packages, labelled `turnwise
    pg+redis baseline`."""
    if not checkout:
        return ()
    root = Path(checkout).resolve()
    if not (root / "backend" / "cli.py").is_file():
        raise SystemExit(f"TURNWISE_CYCLE_BASELINE: {checkout!r} is not a Turnwise checkout")
    settings = {"PYTHONPATH": str(root), BASELINE_CWD: str(root)}
    return (("turnwise pg+redis baseline", "turnwise", "postgresql", 1, CLARIFICATION_CYCLE, settings),)


def switch_runs(spec: str) -> tuple[Run, ...]:
    """TURNWISE_CYCLE_SWITCHES: comma-separated `NAME=VALUE` settings (`TURNWISE_DB_FAST_PATH=0`,
    ...); each adds the Turnwise PostgreSQL + Redis run with that setting, labelled with it, to the
    line-up, so a speed mechanism is measured on and off in the same windows."""
    runs = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        name, sep, value = entry.partition("=")
        if not sep or not name.startswith("TURNWISE_"):
            raise SystemExit(f"TURNWISE_CYCLE_SWITCHES: {entry!r} is not TURNWISE_NAME=VALUE")
        runs.append(
            (f"turnwise pg+redis {entry}", "turnwise", "postgresql", 1, CLARIFICATION_CYCLE, {name: value})
        )
    return tuple(runs)


async def run_all(seconds: float, warmup: float, agent_counts: list[int], rounds: int) -> dict[str, Any]:
    results: dict[str, dict[int, dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    only = os.environ.get("TURNWISE_CYCLE_ONLY", "")
    no_langgraph = langgraph_cycle.missing()
    runs = (
        RUNS
        + baseline_runs(os.environ.get("TURNWISE_CYCLE_BASELINE", ""))
        + switch_runs(os.environ.get("TURNWISE_CYCLE_SWITCHES", ""))
    )

    def lineup(agents: int) -> list[Run]:
        """The runs at `agents`: those chosen; more than 1 worker only at the largest count."""
        return [
            run
            for run in runs
            if chosen(run[0], only, runs) and not (run[3] > 1 and agents != max(agent_counts))
        ]

    # One pool size for every run at every agent count, from the largest line-up (the 2 workers'),
    # so that they all fit in PostgreSQL's connections at once.
    budget = await pool_budget(
        [
            (label, kind, dialect, workers)
            for label, kind, dialect, workers, _, _ in lineup(max(agent_counts))
            if not (kind == "langgraph" and no_langgraph)
        ]
    )
    print(f"  {budget.line()}", flush=True)
    if budget.warning:
        print(f"  {budget.warning}", flush=True)
    # The runs compared with each other (the floor, LangGraph in-process, Turnwise on PostgreSQL and on
    # SQLite, at one agent count) run side by side and take turns, `rounds` windows of `seconds` each, so
    # a machine whose speed drifts over the minutes of a run (a shared 2-core VM does) moves them all
    # alike.
    for agents in agent_counts:
        selected = lineup(agents)
        async with contextlib.AsyncExitStack() as stack:
            loads: list[tuple[str, Load | GraphLoad]] = []
            for label, kind, dialect, workers, cycle, settings in selected:
                load: Load | GraphLoad
                if kind == "langgraph":
                    if no_langgraph:
                        if label not in skipped:
                            print(f"  {label:<28} skipped: {no_langgraph}", flush=True)
                        skipped[label] = no_langgraph
                        continue
                    url, graph = await stack.enter_async_context(graph_serving(budget.pool))
                    load = await open_graph_load(url, graph, agents, warmup)
                else:
                    server = await stack.enter_async_context(
                        serving(kind, dialect, workers, budget.pool, settings)
                    )
                    load = await open_load(server, dialect, agents, warmup, cycle)
                stack.push_async_callback(load.close)
                loads.append((label, load))
            for _ in range(rounds):
                for _, load in loads:
                    await load.window(seconds)
            for label, load in loads:
                await load.stop()
                results.setdefault(label, {})[agents] = await load.result()
            compare(results, agents)
            for label, _ in loads:
                print(f"  {label:<28} {agents:>3} agents  {summary(results[label][agents])}", flush=True)
    return {
        "pool_budget": {**asdict(budget), "room": budget.room},
        "runs": results,
        "skipped": skipped,
        "targets": targets(results, agent_counts, skipped),
    }


# Each Turnwise run's cycles/s is reported as a ratio to these runs' at the same agent count.
REFERENCES = (("floor pg", "floor"), ("langgraph pg", "langgraph"))


def compare(results: dict[str, dict[int, dict[str, Any]]], agents: int) -> None:
    """Add `cycles_per_s_vs_floor` and `cycles_per_s_vs_langgraph` to each Turnwise run at `agents`."""
    for reference_label, name in REFERENCES:
        reference = results.get(reference_label, {}).get(agents)
        if not reference or not reference["cycles_per_s"]:
            continue
        for label, runs in results.items():
            if label.startswith("turnwise") and agents in runs:
                ratio = runs[agents]["cycles_per_s"] / reference["cycles_per_s"]
                runs[agents][f"cycles_per_s_vs_{name}"] = round(ratio, 2)


def chosen(label: str, only: str, runs: tuple[Run, ...] = RUNS) -> bool:
    """TURNWISE_CYCLE_ONLY: comma-separated; an entry that is a whole label picks that run alone,
    any other entry every run whose label contains it."""
    if not only:
        return True
    labels = {run[0] for run in runs}
    return any(label == entry if entry in labels else entry in label for entry in only.split(","))


def summary(r: dict[str, Any]) -> str:
    ratios = ", ".join(
        f"{r[key]}x {name}" for _, name in REFERENCES if (key := f"cycles_per_s_vs_{name}") in r
    )
    return (
        f"{r['cycles_per_s']:>7} cycles/s{f' ({ratios})' if ratios else ''}  "
        f"ask p50/p99 {r['ask_p50_ms']}/{r['ask_p99_ms']} ms  "
        f"respond->answered p50/p99 {r['answered_p50_ms']}/{r['answered_p99_ms']} ms  "
        f"xact/cycle {r['transactions_per_cycle']} (idle pings {r['of_which_pre_pings_per_cycle']}, "
        f"pg_stat {r['pg_stat_transactions_per_cycle']})  "
        f"stmt/cycle {r['statements_per_cycle']}  "
        f"cpu {r['cpu_ms_per_cycle']} ms/cycle{' (bench process)' if 'cpu_of' in r else ''}  "
        f"postgres cpu {r.get('pg_cpu_ms_per_cycle')} ms/cycle  "
        + (
            f"message updates heap-only {r['message_updates_hot']}/{r['message_updates']}  "
            if r.get("message_updates")
            else ""
        )
        + f"errors {r['errors']}"
    )


def targets(
    results: dict[str, dict[int, dict[str, Any]]],
    agent_counts: list[int],
    skipped: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The targets whose runs ran: each needs only its own (a partial run, TURNWISE_CYCLE_ONLY,
    checks those of the runs it chose)."""
    checks: list[dict[str, Any]] = []
    skipped = skipped or {}

    def check(name: str, value: float | None, limit: float, *, at_most: bool = False) -> None:
        met = value is not None and (value <= limit if at_most else value >= limit)
        checks.append({"target": name, "value": value, "limit": limit, "met": met})

    def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> float | None:
        """a[key] / b[key], when both ran and b's is not 0."""
        if not a or not b or a.get(key) is None or not b.get(key):
            return None
        return round(float(a[key]) / float(b[key]), 2)

    empty: dict[int, dict[str, Any]] = {}
    floor, pg = results.get("floor pg", empty), results.get("turnwise pg+redis", empty)
    graph, lite = results.get("langgraph pg", empty), results.get("turnwise sqlite", empty)
    approvals = results.get("turnwise pg+redis approvals", empty)
    two = results.get("turnwise pg+redis 2 workers", empty)
    most, least = max(agent_counts), min(agent_counts)

    # The performance issue's targets, in one run: Turnwise on PostgreSQL at least as fast as LangGraph
    # in-process and at least 0.7x the floor, at every agent count (the floor's was 0.5x before).
    for agents in agent_counts:
        if agents in pg and agents in floor:
            value = pg[agents].get("cycles_per_s_vs_floor")
            check(f"PG cycles/s vs floor at {agents} agents >= 0.7x", value, 0.7)
        name = f"PG cycles/s vs LangGraph in-process at {agents} agents >= 1.0x"
        if agents in pg and agents in graph:
            check(name, pg[agents].get("cycles_per_s_vs_langgraph"), 1.0)
        elif agents in pg and "langgraph pg" in skipped:
            reason = skipped["langgraph pg"]
            checks.append({"target": name, "value": None, "limit": 1.0, "met": None, "skipped": reason})
    for agents in agent_counts:
        if agents in pg and agents in floor:
            # Storage shaped for its hot updates: PostgreSQL's own CPU per cycle against the floor's.
            check(
                f"PostgreSQL CPU per cycle vs floor's at {agents} agents <= 2x",
                ratio(pg[agents], floor[agents], "pg_cpu_ms_per_cycle"),
                2,
                at_most=True,
            )
        if agents in pg and pg[agents].get("message_updates"):
            hot = pg[agents]["message_updates_hot"] / pg[agents]["message_updates"]
            check(f"PG message updates heap-only at {agents} agents (share) >= 0.9", round(hot, 3), 0.9)
    for agents in agent_counts:
        if agents in pg:
            check(
                f"PG transactions per cycle at {agents} agents <= 4",
                pg[agents]["transactions_per_cycle"],
                4,
                at_most=True,
            )
    if most in pg and most in floor:
        p99 = ratio(pg[most], floor[most], "answered_p99_ms")
        check(f"PG respond->answered p99 vs floor at {most} agents <= 2x", p99, 2, at_most=True)
    if least in lite and least in floor:
        check(
            f"SQLite cycles/s vs PG floor at {least} agent(s) >= 0.5x",
            ratio(lite[least], floor[least], "cycles_per_s"),
            0.5,
        )
    # Statements built once: a cycle costs the same whole number of statements however many agents
    # run it. Background work in the window (heartbeats) adds a fraction per cycle, more where fewer
    # cycles ran (a tenth at 1 agent on a slow machine), so the counts are compared to the nearest
    # whole statement; the raw figures are printed beside.
    for label, runs in (("PG", pg), ("SQLite", lite)):
        if all(a in runs for a in agent_counts):
            counts = [runs[a]["statements_per_cycle"] for a in agent_counts]
            spread = None if None in counts else max(round(c) for c in counts) - min(round(c) for c in counts)
            check(
                f"{label} whole statements per cycle constant across agent counts ({counts})",
                spread,
                0,
                at_most=True,
            )
    for agents in agent_counts:
        if agents in approvals and agents in pg:
            # "within 1.1x of the clarification cycle": at most 1.1 times slower
            check(
                f"PG approval cycle vs clarification cycle at {agents} agents >= 1/1.1x",
                ratio(approvals[agents], pg[agents], "cycles_per_s"),
                round(1 / 1.1, 2),
            )
    if most in two and most in pg:
        # Adding a process costs little: server CPU per cycle (both workers and their parent) with
        # 2 workers at most 1.1x that of 1, at the largest agent count.
        check(
            f"PG server CPU per cycle, 2 workers vs 1 at {most} agents <= 1.1x",
            ratio(two[most], pg[most], "cpu_ms_per_cycle"),
            1.1,
            at_most=True,
        )
        checks.append(
            {
                "target": f"PG cycles/s, 2 workers vs 1 at {most} agents (reported, no limit)",
                "value": ratio(two[most], pg[most], "cycles_per_s"),
                "limit": None,
                "met": None,
            }
        )
    return checks


def main() -> None:
    seconds = float(os.environ.get("TURNWISE_CYCLE_SECONDS", "4"))
    warmup = float(os.environ.get("TURNWISE_CYCLE_WARMUP", "1"))
    agent_counts = [int(a) for a in os.environ.get("TURNWISE_CYCLE_AGENTS", "1,50").split(",")]
    rounds = int(os.environ.get("TURNWISE_CYCLE_ROUNDS", "2"))
    started = time.monotonic()
    result = asyncio.run(run_all(seconds, warmup, agent_counts, rounds))
    print("\n  ratios and targets:")
    for c in result["targets"]:
        if c.get("skipped"):
            print(f"  {'SKIPPED':<9} {c['target']}: {c['skipped']}")
            continue
        verdict = "reported" if c["met"] is None else ("MET" if c["met"] else "NOT MET")
        print(f"  {verdict:<9} {c['target']}: {c['value']}")
    result["seconds"] = round(time.monotonic() - started, 1)
    path = write_result("cycle", result)
    print(f"  {result['seconds']} s in all; written to {path.name}")


if __name__ == "__main__":
    main()
