"""Many idle connections and one change they all see: `pendingActionChanged` on a real `turnwise serve`
and on the live floor, side by side in one run.

For each N of TURNWISE_CONN_COUNTS ("1000,5000,10000"), and for each server (the live floor, then
Turnwise), a fresh server process is started (Turnwise on a fresh PostgreSQL database of
TURNWISE_TEST_PG_URL's server, as the tests make them, with the `memory://` bus of one process unless
TURNWISE_CONN_BROADCAST_URL says otherwise; the floor is `python -m bench.floor --live`: Strawberry on
Starlette/uvicorn with the same subscription and result type, a snapshot and then changes, an
in-process asyncio fan-out and no rules). A client process apart
from the server (this module with `--client`) opens N WebSocket connections, each doing the
graphql-transport-ws handshake (`connection_init` with a person's token, then one
`pendingActionChanged(taskId)` for the same task), and reports when every one has received its
snapshot. The server's RSS (VmRSS of /proc/<pid>/status) before the connections and after they are
all subscribed and idle gives the memory per idle connection.

Then TURNWISE_CONN_ROUNDS (5) changes: on Turnwise an agent asks (`askClarification` on the task's
session, over its own WebSocket), then a person answers (`respondToClarification` over HTTP); on the
floor an HTTP `POST /publish` sets the session's pending action, then clears it. For each connection
the client stamps the arrival of the bytes of the change (CLOCK_MONOTONIC, the same clock in every
process) and parses them only after the round, so its own work does not delay later stamps. Per
round: ask -> notified for every connection, so "last notified" is the round's maximum; across
rounds, p50 and p99 of last-notified, and the per-connection p50 / p99 pooled. The answer's
fan-out is reported beside it. Server CPU per ask round is read from /proc/<pid>/stat, and the
statements Turnwise sent to its database over the round from its `/metrics`: the same at every N when
no connection reads the database on a change.

Targets at the largest N (10,000): <= 40 KB per idle connection and last-notified p50 <= 500 ms, each
within 1.5x of the floor's; every connection notified; statements per ask not growing with N.
`python -m bench connections`; TURNWISE_CONN_ONLY ("floor" or "turnwise": one server only, no
targets), TURNWISE_CONN_OPEN_CONCURRENCY (handshakes in flight, 64), TURNWISE_CONN_PROFILE (a path
prefix: py-spy records the Turnwise server over the rounds, raw collapsed stacks),
TURNWISE_CONN_SETTINGS (comma-separated `NAME=VALUE` settings for the Turnwise server: a speed switch
turned off, say, measured against a run without it). Results: bench/results/connections.json.
Everything listens on 127.0.0.1; the open-files limit is raised to its hard limit first (the servers
and the client inherit it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from backend.client.transport import Connection, GraphQLTransport
from bench.common import ServerProcess, median, pct, write_result
from bench.cycle import ANSWER, ASK, RESPOND
from tests.servers import drop_database, fresh_database

ADMIN_TOKEN = "bench-connections-admin-token"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PROTOCOL = Subprotocol("graphql-transport-ws")

SUBSCRIBE = """subscription($t: ID!) {
  pendingActionChanged(taskId: $t) { sessionId pendingAction revision { epoch sequence } } }"""

CREATE_USER = "mutation($n: String!, $r: String!) { createUser(name: $n, role: $r) { id } }"
ISSUE = "mutation($u: ID!, $s: ID) { issueToken(userId: $u, sessionId: $s) { token } }"
CREATE_TASK = "mutation($t: String!) { createTask(title: $t) { id } }"
CREATE_SESSION = "mutation($task: ID!) { createSession(taskId: $task, isPrimary: true) { id } }"
SET_STATE = "mutation($s: ID!, $st: SessionState!) { setSessionState(sessionId: $s, state: $st) { id } }"
GRANT = "mutation($u: ID!, $t: ID!) { grantTask(userId: $u, taskId: $t) }"

# What the bytes of a change carry (orjson writes no spaces), for the stamp taken before parsing.
MARKERS = {"CLARIFICATION": b'"pendingAction":"CLARIFICATION"', None: b'"pendingAction":null'}


def raise_open_files() -> int:
    """The soft open-files limit raised to the hard one; the processes started after inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return int(soft)


# --- the client process ---------------------------------------------------------------------------


class Subscriber(asyncio.Protocol):
    """One connection with one `pendingActionChanged`, on the sans-I/O protocol of `websockets`: no
    task of its own, a callback per read. While armed it only stamps and keeps what it reads."""

    def __init__(self, swarm: Swarm, url: str) -> None:
        self.swarm = swarm
        self.ws = ClientProtocol(parse_uri(url), subprotocols=[PROTOCOL], max_size=None)
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.armed = False
        self.seen = False
        self.chunks: list[tuple[float, bytes]] = []
        self.stamp: float | None = None
        self.last: dict[str, Any] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it
        self.ws.send_request(self.ws.connect())
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"closed before subscribed: {exc}"))
        else:
            self.swarm.lost += 1

    def flush(self) -> None:
        out = self.ws.data_to_send()
        if out and self.transport is not None:
            self.transport.write(b"".join(out))

    def send(self, message: dict[str, Any]) -> None:
        self.ws.send_text(orjson.dumps(message))
        self.flush()

    def data_received(self, data: bytes) -> None:
        if self.armed:
            self.chunks.append((time.monotonic(), data))
            if not self.seen and self.swarm.marker in data:
                self.seen = True
                self.swarm.arrived()
            return
        self.feed(data, None)

    def feed(self, data: bytes, stamp: float | None) -> None:
        self.ws.receive_data(data)
        for event in self.ws.events_received():
            if isinstance(event, Response):
                if event.status_code != 101:
                    self.fail(f"handshake refused: {event.status_code}")
                    return
                self.send({"type": "connection_init", "payload": {"token": self.swarm.token}})
            elif isinstance(event, Frame) and event.opcode == Opcode.TEXT:
                self.message(orjson.loads(event.data), stamp)
        self.flush()

    def message(self, message: dict[str, Any], stamp: float | None) -> None:
        kind = message.get("type")
        if kind == "connection_ack":
            self.send(
                {
                    "id": "1",
                    "type": "subscribe",
                    "payload": {"query": SUBSCRIBE, "variables": {"t": self.swarm.task_id}},
                }
            )
        elif kind == "next":
            projection = message["payload"]["data"]["pendingActionChanged"]
            if stamp is not None and self.stamp is None and projection["pendingAction"] == self.swarm.expect:
                self.stamp = stamp
            self.last = projection
            if not self.ready.done():
                self.ready.set_result(None)
        elif kind in ("error", "complete"):
            self.fail(f"subscription ended: {str(message)[:200]}")

    def fail(self, reason: str) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(reason))
        if self.transport is not None:
            self.transport.close()

    def disarm(self) -> None:
        """Parse what arrived while armed, stamping the change with the arrival of its bytes."""
        self.armed = False
        chunks, self.chunks = self.chunks, []
        for stamp, data in chunks:
            self.feed(data, stamp)


@dataclass
class Swarm:
    url: str = ""
    token: str = ""
    task_id: str = ""
    subscribers: list[Subscriber] = field(default_factory=list)
    expect: str | None = None
    marker: bytes = b""
    count: int = 0
    lost: int = 0
    all_arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def arrived(self) -> None:
        self.count += 1
        if self.count >= len(self.subscribers):
            self.all_arrived.set()

    async def open(self, n: int, concurrency: int, seconds: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        uri = parse_uri(self.url)
        gate = asyncio.Semaphore(concurrency)
        errors: list[str] = []
        started = time.monotonic()

        async def one() -> None:
            async with gate:
                try:
                    _, sub = await asyncio.wait_for(
                        loop.create_connection(lambda: Subscriber(self, self.url), uri.host, uri.port),
                        seconds,
                    )
                    await asyncio.wait_for(sub.ready, seconds)
                except (OSError, TimeoutError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    return
                self.subscribers.append(sub)

        await asyncio.gather(*(one() for _ in range(n)))
        return {
            "opened": len(self.subscribers),
            "errors": len(errors),
            "error_samples": errors[:3],
            "seconds": round(time.monotonic() - started, 1),
        }

    def arm(self, expect: str | None) -> None:
        self.expect, self.marker, self.count = expect, MARKERS[expect], 0
        self.all_arrived.clear()
        for sub in self.subscribers:
            sub.armed, sub.seen, sub.stamp, sub.chunks = True, False, None, []

    async def collect(self, seconds: float) -> dict[str, Any]:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_arrived.wait(), seconds)
        for sub in self.subscribers:
            sub.disarm()
        stamps = [sub.stamp for sub in self.subscribers]
        return {
            "stamps": [s for s in stamps if s is not None],
            "missing": sum(s is None for s in stamps),
            "lost": self.lost,
        }

    def close(self) -> None:
        for sub in self.subscribers:
            if sub.transport is not None:
                sub.transport.close()


async def client_main() -> None:
    """Commands on stdin, one JSON object a line; an answer on stdout for each."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    swarm = Swarm()

    def reply(value: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    while line := await reader.readline():
        command = json.loads(line)
        match command["cmd"]:
            case "open":
                swarm.url, swarm.token, swarm.task_id = command["url"], command["token"], command["task"]
                reply(await swarm.open(command["n"], command["concurrency"], command["timeout"]))
            case "arm":
                swarm.arm(command["expect"])
                reply({"armed": True})
            case "collect":
                reply(await swarm.collect(command["timeout"]))
            case "close":
                swarm.close()
                await asyncio.sleep(0.5)
                reply({"closed": True})
                return


def run_client() -> None:
    raise_open_files()
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        asyncio.run(client_main())
    else:
        uvloop.run(client_main())


@dataclass
class Client:
    """The bench's handle on the client process."""

    proc: asyncio.subprocess.Process

    @classmethod
    async def start(cls) -> Client:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.connections",
            "--client",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 24,
        )
        return cls(proc)

    async def ask(self, command: dict[str, Any], seconds: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), seconds)
        if not line:
            raise RuntimeError(f"the client process ended (exit {await self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(Exception):
                await self.ask({"cmd": "close"}, 30)
            if self.proc.returncode is None:
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


# --- servers --------------------------------------------------------------------------------------


@dataclass
class Server(ServerProcess):
    ready_seconds: float = 60
    stop_seconds: float = 30

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    def rss_kb(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    async def statements(self) -> float | None:
        """SQL statements the server has sent to its database (`/metrics`); None for the floor."""
        if self.kind != "turnwise":
            return None
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{self.base_url}/metrics", timeout=10)).text
        return sum(
            float(v) for v in re.findall(r"^turnwise_db_statements_total(?:{[^}]*})? (\S+)$", text, re.M)
        )


@contextlib.asynccontextmanager
async def serving(kind: str) -> AsyncIterator[Server]:
    url = None
    if kind == "floor":
        server = Server("floor", ["bench.floor", "--live"])
    else:
        url = await asyncio.to_thread(fresh_database, "postgresql")
        env = {
            "TURNWISE_BOOTSTRAP_TOKEN": ADMIN_TOKEN,
            "TURNWISE_DATABASE_URL": url,
            "TURNWISE_BROADCAST_URL": os.environ.get("TURNWISE_CONN_BROADCAST_URL", "memory://"),
        }
        for entry in filter(
            None, (e.strip() for e in os.environ.get("TURNWISE_CONN_SETTINGS", "").split(","))
        ):
            name, _, value = entry.partition("=")
            env[name] = value
        server = Server("turnwise", ["backend.cli", "serve"], env)
    try:
        await server.start()
        yield server
    finally:
        await server.stop()
        if url is not None:
            await asyncio.to_thread(drop_database, url)


# --- one server at one N --------------------------------------------------------------------------


class Trigger:
    """Makes the change every subscriber sees, and undoes it: an ask and its answer on Turnwise, two
    publishes on the floor."""

    async def setup(self, server: Server) -> tuple[str, str]:
        """(task id, the subscribers' token)."""
        raise NotImplementedError

    async def ask(self) -> None:
        raise NotImplementedError

    async def answer(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class FloorTrigger(Trigger):
    task_id = "task-1"

    async def setup(self, server: Server) -> tuple[str, str]:
        self.http = httpx.AsyncClient(base_url=server.base_url, timeout=60)
        await self.http.get("/readyz")  # the keep-alive connection is open before the first change
        return self.task_id, ""

    async def publish(self, pending: str | None) -> None:
        body = {"taskId": self.task_id, "sessionId": f"{self.task_id}-session", "pendingAction": pending}
        (await self.http.post("/publish", json=body)).raise_for_status()

    async def ask(self) -> None:
        await self.publish("CLARIFICATION")

    async def answer(self) -> None:
        await self.publish(None)

    async def close(self) -> None:
        await self.http.aclose()


class TurnwiseTrigger(Trigger):
    """An agent's own WebSocket asks on the task's session; a person answers over HTTP."""

    asks = 0

    async def setup(self, server: Server) -> tuple[str, str]:
        admin = GraphQLTransport(server.base_url, ADMIN_TOKEN)
        try:
            user = (await admin.execute(CREATE_USER, {"n": "person", "r": "user"}))["createUser"]["id"]
            token = (await admin.execute(ISSUE, {"u": user, "s": None}))["issueToken"]["token"]
            task_id = (await admin.execute(CREATE_TASK, {"t": "many watchers"}))["createTask"]["id"]
            self.session_id = (await admin.execute(CREATE_SESSION, {"task": task_id}))["createSession"]["id"]
            await admin.execute(SET_STATE, {"s": self.session_id, "st": "RUNNING"})
            await admin.execute(GRANT, {"u": user, "t": task_id})
            agent = (await admin.execute(CREATE_USER, {"n": "agent", "r": "agent"}))["createUser"]["id"]
            agent_token = (await admin.execute(ISSUE, {"u": agent, "s": self.session_id}))["issueToken"][
                "token"
            ]
        finally:
            await admin.aclose()
        self.agent = await Connection.open(server.ws_url, agent_token)
        self.person = GraphQLTransport(server.base_url, token)
        await self.person.execute("{ __typename }")  # the keep-alive connection is open
        return str(task_id), str(token)

    async def ask(self) -> None:
        self.asks += 1
        question = {"prompt": f"shall I go on ({self.asks})?", "options": [{"label": "a"}, {"label": "b"}]}
        self.sub = await self.agent.subscribe(ASK, {"s": self.session_id, "q": [question]})
        asked = (await self.sub.next(timeout=60))["askClarification"]
        if asked["__typename"] != "ClarificationAsked":
            raise RuntimeError(f"ask ended with {asked}")
        self.pending_id = asked["bundle"]["pendingId"]

    async def answer(self) -> None:
        result = (await self.person.execute(RESPOND, {"p": self.pending_id, "a": ANSWER}))[
            "respondToClarification"
        ]
        outcome = (await self.sub.next(timeout=60))["askClarification"]
        if (
            result["__typename"] != "ClarificationResponded"
            or outcome["__typename"] != "ClarificationAnswered"
        ):
            raise RuntimeError(f"answer ended with {result} / {outcome}")

    async def close(self) -> None:
        await self.agent.close()
        await self.person.aclose()


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def spread(latencies: list[float]) -> dict[str, float | None]:
    if not latencies:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    return {"p50_ms": ms(pct(latencies, 50)), "p99_ms": ms(pct(latencies, 99)), "max_ms": ms(max(latencies))}


async def change(
    client: Client, server: Server, expect: str | None, make: Callable[[], Awaitable[None]]
) -> dict[str, Any]:
    """One change, timed from just before it is made to each connection's arrival; with the server's
    CPU and the statements it sent to its database meanwhile."""
    await client.ask({"cmd": "arm", "expect": expect}, 30)
    statements0 = await server.statements()
    cpu0 = server.cpu_seconds()
    began = time.monotonic()
    await make()
    seen = await client.ask({"cmd": "collect", "timeout": 60}, 120)
    cpu = server.cpu_seconds() - cpu0
    statements1 = await server.statements()
    return {
        "latencies": [s - began for s in seen["stamps"]],
        "missing": seen["missing"],
        "lost": seen["lost"],
        "cpu": cpu,
        "statements": None if statements0 is None or statements1 is None else statements1 - statements0,
    }


def start_profiler(server: Server, n: int) -> subprocess.Popen[bytes] | None:
    prefix = os.environ.get("TURNWISE_CONN_PROFILE")
    if not prefix or server.proc is None or server.kind != "turnwise":
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(spy), "record", "-p", str(server.proc.pid), "-r", "250", "-f", "raw", "-o", f"{prefix}-{n}.txt"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        try:
            profiler.wait(30)
        except subprocess.TimeoutExpired:
            profiler.kill()
            profiler.wait()


async def measure(kind: str, n: int, rounds: int, concurrency: int) -> dict[str, Any]:
    trigger: Trigger = FloorTrigger() if kind == "floor" else TurnwiseTrigger()
    async with serving(kind) as server:
        client = await Client.start()
        try:
            task_id, token = await trigger.setup(server)
            await asyncio.sleep(1.0)
            rss_before = server.rss_kb()
            statements_before = await server.statements()
            opened = await client.ask(
                {
                    "cmd": "open",
                    "url": server.ws_url,
                    "token": token,
                    "task": task_id,
                    "n": n,
                    "concurrency": concurrency,
                    "timeout": 120,
                },
                seconds=max(600, n / 10),
            )
            await asyncio.sleep(2.0)  # idle: whatever the subscriptions started has settled
            rss_after = server.rss_kb()
            statements_after = await server.statements()
            asks: list[dict[str, Any]] = []
            answers: list[dict[str, Any]] = []
            profiler = start_profiler(server, n)
            try:
                for _ in range(rounds):
                    asks.append(await change(client, server, "CLARIFICATION", trigger.ask))
                    await asyncio.sleep(0.3)
                    answers.append(await change(client, server, None, trigger.answer))
                    await asyncio.sleep(0.3)
            finally:
                await asyncio.to_thread(stop_profiler, profiler)
            rss_end = server.rss_kb()
        finally:
            await client.stop()
            await trigger.close()
    last = [max(a["latencies"]) for a in asks if a["latencies"]]
    opened_n = max(opened["opened"], 1)
    return {
        "connections": opened["opened"],
        "open_errors": opened["errors"],
        "open_error_samples": opened["error_samples"],
        "open_seconds": opened["seconds"],
        # What the server sent to its database per connection opened and subscribed (its snapshot):
        # None for the floor, which has no database.
        "statements_per_open": None
        if statements_before is None or statements_after is None
        else round((statements_after - statements_before) / opened_n, 3),
        "rss_before_kb": rss_before,
        "rss_idle_kb": rss_after,
        "rss_after_rounds_kb": rss_end,
        "rss_per_idle_connection_kb": round((rss_after - rss_before) / opened_n, 1),
        "ask_last_notified_ms": [ms(x) for x in last],
        "ask_last_notified_p50_ms": ms(pct(last, 50)) if last else None,
        "ask_last_notified_p99_ms": ms(pct(last, 99)) if last else None,
        "ask_notified": spread([x for a in asks for x in a["latencies"]]),
        "answer_notified": spread([x for a in answers for x in a["latencies"]]),
        "missing": sum(a["missing"] for a in asks + answers),
        "lost_connections": max((a["lost"] for a in asks + answers), default=0),
        "server_cpu_ms_per_ask": round(sum(a["cpu"] for a in asks) * 1000 / max(len(asks), 1), 1),
        # What the server sent to its database while an ask was made and fanned out (the ask's own
        # statements, background work of the moment): the same at every N when no connection reads.
        "statements_per_ask": statements_per_ask(asks),
    }


def statements_per_ask(asks: list[dict[str, Any]]) -> float | None:
    counted = [a["statements"] for a in asks if a["statements"] is not None]
    return median(counted) if counted else None


def targets(results: dict[str, dict[int, dict[str, Any]]], most: int) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []

    def check(name: str, value: float | None, limit: float) -> None:
        checks.append(
            {"target": name, "value": value, "limit": limit, "met": value is not None and value <= limit}
        )

    tw, floor = results.get("turnwise", {}).get(most), results.get("floor", {}).get(most)
    if not tw or not floor:
        return checks
    memory, latency = tw["rss_per_idle_connection_kb"], tw["ask_last_notified_p50_ms"]
    check(f"RSS per idle connection at {most} <= 40 KB", memory, 40)
    check(f"ask -> last notified p50 at {most} <= 500 ms", latency, 500)
    floor_memory, floor_latency = floor["rss_per_idle_connection_kb"], floor["ask_last_notified_p50_ms"]
    check(
        f"RSS per idle connection at {most} vs floor <= 1.5x",
        round(memory / floor_memory, 2) if floor_memory else None,
        1.5,
    )
    check(
        f"ask -> last notified p50 at {most} vs floor <= 1.5x",
        round(latency / floor_latency, 2) if latency and floor_latency else None,
        1.5,
    )
    check(f"every connection notified of every change at {most}", tw["missing"] + floor["missing"], 0)
    least = min(results["turnwise"])
    few, many = results["turnwise"][least]["statements_per_ask"], tw["statements_per_ask"]
    if least < most and few is not None and many is not None:
        # One read per change, not one per connection: the count does not grow with the connections
        # (a read per connection would add one statement per connection added; background work in the
        # window moves it by a statement or two).
        check(
            f"db statements per ask at {most} minus at {least} connections <= 3 (no read per connection)",
            many - few,
            3,
        )
    return checks


def summary(r: dict[str, Any]) -> str:
    ask = r["ask_notified"]
    return (
        f"{r['connections']:>6} conns ({r['open_errors']} errors, {r['open_seconds']} s to open, "
        f"db statements/open {r['statements_per_open']})  "
        f"{r['rss_per_idle_connection_kb']:>6} KB/conn  "
        f"ask->last notified p50/p99 {r['ask_last_notified_p50_ms']}/{r['ask_last_notified_p99_ms']} ms  "
        f"per conn p50/p99 {ask['p50_ms']}/{ask['p99_ms']} ms  "
        f"answer->last {r['answer_notified']['max_ms']} ms  "
        f"cpu/ask {r['server_cpu_ms_per_ask']} ms  db statements/ask {r['statements_per_ask']}  "
        f"missing {r['missing']}"
    )


async def run_all(counts: list[int], rounds: int, concurrency: int, kinds: list[str]) -> dict[str, Any]:
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for n in counts:
        for kind in kinds:
            r = await measure(kind, n, rounds, concurrency)
            results.setdefault(kind, {})[n] = r
            print(f"  {kind:<9} {summary(r)}", flush=True)
        tw, floor = results.get("turnwise", {}).get(n), results.get("floor", {}).get(n)
        if tw and floor:
            if floor["rss_per_idle_connection_kb"]:
                tw["rss_vs_floor"] = round(
                    tw["rss_per_idle_connection_kb"] / floor["rss_per_idle_connection_kb"], 2
                )
            if floor["ask_last_notified_p50_ms"]:
                tw["last_notified_vs_floor"] = round(
                    tw["ask_last_notified_p50_ms"] / floor["ask_last_notified_p50_ms"], 2
                )
            print(
                f"  {'ratio':<9} {n:>6} conns  memory {tw.get('rss_vs_floor')}x floor  "
                f"last notified {tw.get('last_notified_vs_floor')}x floor",
                flush=True,
            )
    return {"runs": results, "targets": targets(results, max(counts))}


def main() -> None:
    counts = [int(c) for c in os.environ.get("TURNWISE_CONN_COUNTS", "1000,5000,10000").split(",")]
    rounds = int(os.environ.get("TURNWISE_CONN_ROUNDS", "5"))
    concurrency = int(os.environ.get("TURNWISE_CONN_OPEN_CONCURRENCY", "64"))
    only = os.environ.get("TURNWISE_CONN_ONLY", "")
    kinds = [k for k in ("floor", "turnwise") if not only or k == only]
    limit = raise_open_files()
    print(f"  open-files limit {limit}", flush=True)
    started = time.monotonic()
    result = asyncio.run(run_all(counts, rounds, concurrency, kinds))
    print("\n  targets:")
    for c in result["targets"]:
        print(f"  {'MET' if c['met'] else 'NOT MET':<9} {c['target']}: {c['value']}")
    result["seconds"] = round(time.monotonic() - started, 1)
    result["settings"] = {"counts": counts, "rounds": rounds, "open_concurrency": concurrency}
    path = write_result("connections", result)
    print(f"  {result['seconds']} s in all; written to {path.name}")


if __name__ == "__main__":
    if "--client" in sys.argv[1:]:
        run_client()
    else:
        main()
