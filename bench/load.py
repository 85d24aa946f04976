"""Load and soak: N agents and M clients against one server on PostgreSQL + Redis, over loopback.

Agents ask through the `askClarification` subscription (WebSocket) with short timeouts, act after an
answer (post a message), and start new turns now and then; clients read their task lists, answer
questions (some while the agent still waits, some after it detached), skip some, and reconnect their
`pendingActionChanged` subscriptions. Detached answers resume agents through the scripted executor,
whose log is the dispatch record. At the end the database, the agents' received answers and that log
must agree: every answered bundle reached its agent exactly once (live, or by one resume dispatch).

`python -m bench load`; settings from the environment: TURNWISE_LOAD_SECONDS (60), TURNWISE_LOAD_AGENTS
(12), TURNWISE_LOAD_CLIENTS (6). Results go to bench/results/load.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from backend.db.engine import Database
from backend.db.tables import task_session_messages as M
from backend.repository import message_fields
from bench.common import pct, write_result
from tests.api.client import Client, GraphQLError
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

REDIS_URL = os.environ.get("TURNWISE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $t: Float) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: $t) {
    __typename
    ... on ClarificationAsked { bundle { pendingId } }
    ... on ClarificationAnswered { pendingId }
    ... on ClarificationRejected { pendingId }
    ... on ClarificationDetached { pendingId }
    ... on ClarificationClosed { pendingId status } } }"""
TASKS = """{ tasks { id sessions { id pendingAction activeClarification {
  pendingId state questions { questionId status options { id } } } } } }"""
RESPOND = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!, $r: Boolean!) {
  respondToClarification(pendingId: $p, answers: $a, rejected: $r) {
    __typename
    ... on ClarificationResponded { resumed }
    ... on ClarificationConflict { reason }
    ... on ClarificationDeliveryFailed { retryable message } } }"""
PROJECTIONS = "subscription { pendingActionChanged { sessionId pendingAction revision { epoch sequence } } }"
POST = 'mutation($s: ID!) { postMessage(sessionId: $s, content: "on it") { id } }'
START = "mutation($s: ID!) { startTurn(sessionId: $s) { id } }"
COMPLETE = "mutation($t: ID!, $g: String) { completeTurn(turnId: $t, generation: $g) { id } }"
TURNS = "query($s: ID!) { sessionTurns(sessionId: $s) { id completedAt lifecycleOnly } }"


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    # pending_id -> how many times an agent received it as an answer on its live wait
    live_answers: Counter[str] = field(default_factory=Counter)
    responded: dict[str, str] = field(default_factory=dict)  # pending_id -> answered | rejected

    def error(self, op: str, exc: BaseException | str) -> None:
        self.errors[op] += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(f"{op}: {str(exc)[:300]}")

    async def timed(self, op: str, work: Any) -> Any:
        start = time.perf_counter()
        try:
            result = await work
        except (
            GraphQLError,
            OSError,
            httpx.HTTPError,
            TimeoutError,
            AssertionError,
            StopAsyncIteration,
        ) as exc:
            self.error(op, exc)
            return None
        self.latencies[op].append(time.perf_counter() - start)
        return result


def questions(n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {"prompt": f"{tag} question {i + 1}?", "options": [{"label": "yes"}, {"label": "no"}]}
        for i in range(n)
    ]


async def agent(
    base_url: str, token: str, session_id: str, stop: float, stats: Stats, rng: random.Random
) -> None:
    client = Client(base_url, token)
    await client.execute(START, {"s": session_id})
    round_no = 0
    try:
        while time.monotonic() < stop:
            round_no += 1
            variables = {
                "s": session_id,
                "q": questions(rng.randint(1, 3), f"{session_id[-6:]}-{round_no}"),
                "t": rng.uniform(0.5, 4.0),
            }
            try:
                async with client.subscribe(ASK, variables) as sub:
                    started = time.perf_counter()
                    asked = await sub.next(10)
                    stats.latencies["ask"].append(time.perf_counter() - started)
                    assert asked["askClarification"]["__typename"] == "ClarificationAsked", asked
                    outcome = (await sub.next(30))["askClarification"]
            except (
                GraphQLError,
                OSError,
                httpx.HTTPError,
                TimeoutError,
                AssertionError,
                StopAsyncIteration,
            ) as exc:
                stats.error("ask", exc)
                await asyncio.sleep(0.2)
                continue
            kind = outcome["__typename"]
            stats.outcomes[f"agent:{kind}"] += 1
            if kind == "ClarificationAnswered":
                stats.live_answers[outcome["pendingId"]] += 1
                # Agent activity after an answer: what cancels the primary-answer watchdog.
                await stats.timed("postMessage", client.execute(POST, {"s": session_id}))
            if rng.random() < 0.15:
                # New work: the current turn completes (a resume may have opened a successor since) and
                # a newer one supersedes anything still pending.
                await complete_current(client, session_id, stats)
                await stats.timed("startTurn", client.execute(START, {"s": session_id}))
    finally:
        await client.aclose()


async def complete_current(client: Client, session_id: str, stats: Stats) -> None:
    """The agent's ready event for its newest open turn, with that turn as its prompt generation. A
    resume racing it may close or supersede that turn first: the server then refuses the stale ready
    event, which is the specified outcome, not an error."""
    turns = await stats.timed("sessionTurns", client.execute(TURNS, {"s": session_id}))
    if turns is None:
        return
    open_turns = [t for t in turns["sessionTurns"] if t["completedAt"] is None and not t["lifecycleOnly"]]
    if not open_turns:
        return
    turn = open_turns[-1]["id"]
    started = time.perf_counter()
    try:
        await client.execute(COMPLETE, {"t": turn, "g": turn})
    except GraphQLError as exc:
        if set(exc.codes) <= {"STALE_GENERATION", "INVALID_STATE"}:
            stats.outcomes[f"completeTurn:refused:{exc.codes[0]}"] += 1
            return
        stats.error("completeTurn", exc)
        return
    except (OSError, httpx.HTTPError, TimeoutError) as exc:
        stats.error("completeTurn", exc)
        return
    stats.latencies["completeTurn"].append(time.perf_counter() - started)


async def client_loop(base_url: str, token: str, stop: float, stats: Stats, rng: random.Random) -> None:
    client = Client(base_url, token)
    try:
        while time.monotonic() < stop:
            data = await stats.timed("tasks", client.execute(TASKS))
            if data is None:
                await asyncio.sleep(0.2)
                continue
            bundles = [
                s["activeClarification"]
                for t in data["tasks"]
                for s in t["sessions"]
                if s["activeClarification"] is not None
            ]
            rng.shuffle(bundles)
            for bundle in bundles[:2]:
                # Some answers arrive while the agent waits, some only after it detached.
                await asyncio.sleep(rng.uniform(0, 1.5))
                rejected = rng.random() < 0.1
                answers = [
                    {"questionId": q["questionId"], "selectedOptionIds": [q["options"][0]["id"]]}
                    for q in bundle["questions"]
                    if q["status"] == "PENDING"
                ]
                op = "respond_detached" if bundle["state"] == "ACTIVE_DETACHED" else "respond_live"
                variables = {"p": bundle["pendingId"], "a": [] if rejected else answers, "r": rejected}
                for _attempt in range(2):
                    result = await stats.timed(op, client.execute(RESPOND, variables))
                    if result is None:
                        break
                    r = result["respondToClarification"]
                    detail = r.get("reason") or r.get("resumed")
                    if r["__typename"] == "ClarificationDeliveryFailed":
                        # Specified outcomes of racing the agent's own timeout or a newer turn:
                        # retryable means restored (answer again, as a person would), final means
                        # the question is no longer current. Neither may lose or repeat an answer.
                        detail = "retryable" if r["retryable"] else "final"
                    stats.outcomes[f"respond:{r['__typename']}:{detail}"] += 1
                    if r["__typename"] == "ClarificationResponded":
                        stats.responded[bundle["pendingId"]] = "rejected" if rejected else "answered"
                    if detail != "retryable":
                        break
                    op = "respond_retry"
            await asyncio.sleep(rng.uniform(0.05, 0.3))
    finally:
        await client.aclose()


async def watcher(base_url: str, token: str, stop: float, stats: Stats, rng: random.Random) -> None:
    """A browser tab: holds pendingActionChanged, reconnects every few seconds, checks revisions."""
    client = Client(base_url, token)
    seen: dict[str, tuple[int, int]] = {}
    try:
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                async with client.subscribe(PROJECTIONS) as sub:
                    first = await sub.next(10)
                    stats.latencies["reconnect"].append(time.perf_counter() - started)
                    until = time.monotonic() + rng.uniform(2, 6)
                    event = first
                    while True:
                        p = event["pendingActionChanged"]
                        key = (int(p["revision"]["epoch"]), int(p["revision"]["sequence"]))
                        if key < seen.get(p["sessionId"], (0, 0)):
                            stats.error("revision", f"older revision {key} after {seen[p['sessionId']]}")
                        seen[p["sessionId"]] = max(key, seen.get(p["sessionId"], (0, 0)))
                        remaining = min(until, stop) - time.monotonic()
                        if remaining <= 0:
                            break
                        try:
                            event = await sub.next(remaining)
                        except TimeoutError:
                            break
            except (GraphQLError, OSError, httpx.HTTPError, AssertionError, StopAsyncIteration) as exc:
                stats.error("reconnect", exc)
                await asyncio.sleep(0.2)
    finally:
        await client.aclose()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def sample_rss(pid: int, stop: float, samples: list[tuple[float, float]]) -> None:
    start = time.monotonic()
    while time.monotonic() < stop:
        samples.append((time.monotonic() - start, rss_mb(pid)))
        await asyncio.sleep(1.0)


async def setup(admin: Client, agents: int, clients: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(session id, agent token) per agent, and one user token per client (granted every task)."""
    users = []
    for c in range(clients):
        user_id = (await admin.execute(CREATE_USER, {"n": f"client-{c}", "r": "user"}))["createUser"]["id"]
        token = (await admin.execute(ISSUE, {"u": user_id, "s": None}))["issueToken"]["token"]
        users.append((user_id, token))
    sessions = []
    for a in range(agents):
        task_id = (await admin.execute(CREATE_TASK, {"t": f"load task {a}"}))["createTask"]["id"]
        session_id = (await admin.execute(CREATE_SESSION, {"task": task_id}))["createSession"]["id"]
        await admin.execute(SET_STATE, {"s": session_id, "st": "RUNNING"})
        agent_id = (await admin.execute(CREATE_USER, {"n": f"agent-{a}", "r": "agent"}))["createUser"]["id"]
        token = (await admin.execute(ISSUE, {"u": agent_id, "s": session_id}))["issueToken"]["token"]
        sessions.append((session_id, token))
        for user_id, _ in users:
            await admin.execute(GRANT, {"u": user_id, "t": task_id})
    return sessions, [t for _, t in users]


CREATE_USER = "mutation($n: String!, $r: String!) { createUser(name: $n, role: $r) { id } }"
ISSUE = "mutation($u: ID!, $s: ID) { issueToken(userId: $u, sessionId: $s) { token } }"
CREATE_TASK = "mutation($t: String!) { createTask(title: $t) { id } }"
CREATE_SESSION = "mutation($task: ID!) { createSession(taskId: $task, isPrimary: true) { id } }"
SET_STATE = "mutation($s: ID!, $st: SessionState!) { setSessionState(sessionId: $s, state: $st) { id } }"
GRANT = "mutation($u: ID!, $t: ID!) { grantTask(userId: $u, taskId: $t) }"


async def invariants(database_url: str, log_path: Path, stats: Stats) -> dict[str, Any]:
    """From the database and the executor's own log: every answered bundle delivered exactly once."""
    text = await asyncio.to_thread(log_path.read_text)
    dispatches = [json.loads(line) for line in text.splitlines() if line.strip()]
    resumed = Counter(d["pending_id"] for d in dispatches if d["outcome"] in ("accepted", "ambiguous"))
    db = Database(database_url)
    try:
        async with db.read() as conn:
            rows = (
                await conn.execute(
                    select(M.c.id, *message_fields.COLUMNS).where(M.c.type == "clarification_request")
                )
            ).all()
    finally:
        await db.dispose()
    statuses: dict[str, set[str]] = defaultdict(set)
    intents = 0
    for row in rows:
        md = message_fields.metadata_of(row._mapping, where=row.id)
        statuses[md["pending_id"]].add(md.get("status") or "pending")
        intents += bool(md.get("response_delivery_pending"))
    answered = {p for p, s in statuses.items() if "answered" in s}
    rejected = {p for p, s in statuses.items() if "rejected" in s}
    delivered = stats.live_answers + resumed
    twice = sorted(p for p, n in delivered.items() if n > 1)
    resumed_rejections = sorted(p for p in rejected if resumed[p])
    unanswered_success = sorted(
        p for p, how in stats.responded.items() if how not in statuses.get(p, set()) and how == "answered"
    )
    acknowledged = {p for p, how in stats.responded.items() if how == "answered"}
    # An answer is lost when its responder was told it succeeded and no agent ever received it.
    lost = sorted(p for p in acknowledged if delivered[p] == 0)
    # Answered rows nobody received whose responder got an error instead: a live hand-off that
    # lost to a newer turn stays terminal by the spec (retrying could not reach a current agent).
    settled_undelivered = sorted(p for p in answered if delivered[p] == 0 and p not in acknowledged)
    return {
        "bundles": len(statuses),
        "answered": len(answered),
        "rejected": len(rejected),
        "delivered_live": sum(stats.live_answers.values()),
        "delivered_by_resume": sum(resumed.values()),
        "dispatches_logged": len(dispatches),
        "lost_answers": lost,
        "answered_without_success_or_delivery": len(settled_undelivered),
        "delivered_twice": twice,
        "resumed_rejections": resumed_rejections,
        "success_without_stored_answer": unanswered_success,
        "stranded_delivery_intents": intents,
        "ok": not (lost or twice or resumed_rejections or unanswered_success or intents),
    }


async def run_load(seconds: float, agents: int, clients: int) -> dict[str, Any]:
    database_url = await asyncio.to_thread(fresh_database, "postgresql")
    log_path = Path(tempfile.mkstemp(prefix="turnwise-load-dispatch-", suffix=".jsonl")[1])
    server = Server(
        database_url,
        broadcast_url=REDIS_URL,
        env={
            "TURNWISE_EXECUTOR": "scripted",
            "TURNWISE_SCRIPTED_OUTCOMES": "accepted",
            "TURNWISE_SCRIPTED_LOG": str(log_path),
            # A live answer whose waiter never confirms shows up within seconds, as an error.
            "TURNWISE_LIVE_CONFIRMATION_SECONDS": "10",
        },
    )
    await asyncio.to_thread(server.start)
    assert server.proc is not None
    stats = Stats()
    samples: list[tuple[float, float]] = []
    try:
        admin = Client(server.base_url, ADMIN_TOKEN)
        sessions, user_tokens = await setup(admin, agents, clients)
        await admin.aclose()
        rng = random.Random(7)
        began = time.monotonic()
        stop = began + seconds
        work = [
            agent(server.base_url, token, session_id, stop, stats, random.Random(rng.random()))
            for session_id, token in sessions
        ]
        for i, token in enumerate(user_tokens):
            work.append(client_loop(server.base_url, token, stop, stats, random.Random(rng.random())))
            if i % 2 == 0:
                work.append(watcher(server.base_url, token, stop, stats, random.Random(rng.random())))
        work.append(sample_rss(server.proc.pid, stop, samples))
        await asyncio.gather(*work)
        elapsed = time.monotonic() - began
        # Let in-flight resumes and deliveries settle before reading the database.
        await asyncio.sleep(2)
        checked = await invariants(database_url, log_path, stats)
    finally:
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(drop_database, database_url)
        await asyncio.to_thread(log_path.unlink, True)
    warm = [mb for t, mb in samples if t >= seconds * 0.25]
    ops = {
        op: {
            "count": len(v),
            "per_second": round(len(v) / elapsed, 1),
            "p50_ms": round(pct(v, 50) * 1000, 1),
            "p99_ms": round(pct(v, 99) * 1000, 1),
        }
        for op, v in sorted(stats.latencies.items())
        if v
    }
    total = sum(len(v) for v in stats.latencies.values())
    return {
        "seconds": round(elapsed, 1),
        "agents": agents,
        "clients": clients,
        "backend": "postgresql + redis, one server process",
        "throughput_ops_per_second": round(total / elapsed, 1),
        "operations": ops,
        "outcomes": dict(sorted(stats.outcomes.items())),
        "errors": dict(stats.errors),
        "error_count": sum(stats.errors.values()),
        "error_samples": stats.error_samples,
        "rss_mb": {
            "start": round(samples[0][1], 1) if samples else None,
            "after_warmup": round(warm[0], 1) if warm else None,
            "end": round(samples[-1][1], 1) if samples else None,
            "max": round(max(mb for _, mb in samples), 1) if samples else None,
            "growth_after_warmup": round(warm[-1] - warm[0], 1) if warm else None,
            "median_after_warmup": round(statistics.median(warm), 1) if warm else None,
        },
        "invariants": checked,
    }


def main() -> None:
    seconds = float(os.environ.get("TURNWISE_LOAD_SECONDS", "60"))
    agents = int(os.environ.get("TURNWISE_LOAD_AGENTS", "12"))
    clients = int(os.environ.get("TURNWISE_LOAD_CLIENTS", "6"))
    result = asyncio.run(run_load(seconds, agents, clients))
    path = write_result("load", result)
    print(json.dumps({k: v for k, v in result.items() if k != "error_samples"}, indent=2))
    if result["error_samples"]:
        print("errors:", *result["error_samples"], sep="\n  ")
    print(f"written to {path.name}")


if __name__ == "__main__":
    main()
