"""Subscriptions over real servers: events converge a client to a fresh fetch (Zulip's pattern),
snapshots make reconnects converge without replay, and Redis carries changes between processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import websockets

from backend import jsoncodec
from backend.client.transport import Connection, GraphQLRequestError
from frontend_py.kit import revision
from tests.api.client import Client, GraphQLError, Subscription
from tests.api.gql import (
    COMPLETE,
    DELETE,
    MESSAGES,
    POST,
    PROJECTIONS,
    SESSION_EVENTS,
    SESSIONS,
    SET_STATE,
    START,
    SUMMARIES,
    TASKS,
    running_session,
)
from tests.conftest import redis_url
from tests.dialects import served
from tests.servers import ADMIN_TOKEN, Server, server_pair


class ClientState:
    """What a client holds for one task: messages, session projections, the task summary."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.messages: dict[str, dict[str, Any]] = {}
        self.projections: dict[str, dict[str, Any]] = {}
        self.summary: dict[str, Any] | None = None

    def merge_projection(self, session_id: str, pending: Any, rev: Any) -> None:
        held = self.projections.get(session_id)
        if held is None or revision.is_newer_or_equal(rev, held["revision"]):
            self.projections[session_id] = {"pendingAction": pending, "revision": rev}

    def apply(self, payload: dict[str, Any]) -> None:
        if "sessionEvents" in payload:
            event = payload["sessionEvents"]
            if event["projection"] is not None:
                p = event["projection"]
                self.merge_projection(p["sessionId"], p["pendingAction"], p["revision"])
            if event["kind"] == "DELETED":
                self.messages.pop(event["messageId"], None)
            else:
                self.messages[event["messageId"]] = event["message"]
        elif "pendingActionChanged" in payload:
            p = payload["pendingActionChanged"]
            self.merge_projection(p["sessionId"], p["pendingAction"], p["revision"])
        elif "taskSummaryChanged" in payload:
            s = payload["taskSummaryChanged"]
            if s["taskId"] != self.task_id:
                return
            if self.summary is None or s["revision"] > self.summary["revision"]:
                self.summary = s

    def view(self) -> dict[str, Any]:
        return {"messages": self.messages, "projections": self.projections, "summary": self.summary}


async def fetch(admin: Client, task_id: str, session_id: str) -> dict[str, Any]:
    """fetch_initial_state: what a fresh client would load."""
    state = ClientState(task_id)
    for m in (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"]:
        state.messages[m["id"]] = m
    for s in (await admin.execute(SESSIONS, {"task": task_id}))["taskSessions"]:
        state.merge_projection(s["id"], s["pendingAction"], s["pendingActionRevision"])
    state.summary = next(t for t in (await admin.execute(TASKS))["tasks"] if t["id"] == task_id)["summary"]
    return state.view()


@contextlib.asynccontextmanager
async def applying(subs: list[Subscription], state: ClientState) -> AsyncIterator[None]:
    async def pump(sub: Subscription) -> None:
        while True:
            state.apply(await sub.next(timeout=3600))

    tasks = [asyncio.create_task(pump(s)) for s in subs]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()


async def converges(state: ClientState, expected: Callable[[], Any]) -> None:
    deadline = asyncio.get_running_loop().time() + 5.0
    while True:
        want = await expected()
        if state.view() == want:
            return
        if asyncio.get_running_loop().time() > deadline:
            assert state.view() == want
        await asyncio.sleep(0.05)


async def test_applying_emitted_events_to_the_old_state_equals_a_fresh_fetch(admin: Client) -> None:
    task_id, session_id = await running_session(admin)
    state = ClientState(task_id)
    async with (
        admin.subscribe(SESSION_EVENTS, {"s": session_id}) as events,
        admin.subscribe(PROJECTIONS, {"t": task_id}) as projections,
        admin.subscribe(SUMMARIES) as summaries,
    ):
        initial = await fetch(admin, task_id, session_id)
        state.messages = dict(initial["messages"])
        state.projections = dict(initial["projections"])
        state.summary = initial["summary"]
        async with applying([events, projections, summaries], state):

            async def fresh() -> Any:
                return await fetch(admin, task_id, session_id)

            async def post(kind: str) -> str:
                body = await admin.execute(POST, {"s": session_id, "c": kind, "k": kind})
                return str(body["postMessage"]["id"])

            await post("message")
            await converges(state, fresh)
            permission = await post("permission_request")
            await converges(state, fresh)
            assert state.summary is not None
            assert state.summary["pendingAction"] == "PERMISSION"
            await admin.execute(DELETE, {"m": permission})
            await converges(state, fresh)
            await post("permission_request")
            await converges(state, fresh)
            # A newer turn supersedes the older turn's request: projection and summary go clean.
            turn = (await admin.execute(START, {"s": session_id}))["startTurn"]["id"]
            await converges(state, fresh)
            assert state.projections[session_id]["pendingAction"] is None
            await post("permission_request")
            await admin.execute(COMPLETE, {"t": turn})
            await converges(state, fresh)
            await admin.execute(SET_STATE, {"s": session_id, "st": "COMPLETED"})
            await converges(state, fresh)
            assert state.summary is not None
            assert state.summary["pendingAction"] is None


async def test_pending_action_changed_sends_a_snapshot_and_a_reconnect_converges_without_replay(
    admin: Client,
) -> None:
    task_id, session_id = await running_session(admin)
    async with admin.subscribe(PROJECTIONS, {"s": session_id}) as sub:
        first = (await sub.next())["pendingActionChanged"]
    assert first["sessionId"] == session_id
    assert first["pendingAction"] is None
    # Changes made while disconnected are not replayed one by one: the new snapshot is the state.
    for _ in range(3):
        await admin.execute(POST, {"s": session_id, "c": "may I?", "k": "permission_request"})
    async with admin.subscribe(PROJECTIONS, {"t": task_id}) as sub:
        snapshot = (await sub.next())["pendingActionChanged"]
        assert snapshot["pendingAction"] == "PERMISSION"
        assert int(snapshot["revision"]["sequence"]) == int(first["revision"]["sequence"]) + 3
        with pytest.raises(asyncio.TimeoutError):
            await sub.next(timeout=0.5)
    async with admin.subscribe(SUMMARIES) as sub:
        summaries = [(await sub.next())["taskSummaryChanged"]]
        while summaries[-1]["taskId"] != task_id:
            summaries.append((await sub.next())["taskSummaryChanged"])
        assert summaries[-1]["pendingAction"] == "PERMISSION"


async def test_session_events_carry_explicit_clean_projection_and_deleted_has_no_message(
    admin: Client,
) -> None:
    _, session_id = await running_session(admin)
    async with admin.subscribe(SESSION_EVENTS, {"s": session_id}) as sub:
        # No snapshot tells when the subscription is attached: post until its first event arrives.
        posted: list[str] = []
        for _ in range(20):
            body = await admin.execute(POST, {"s": session_id, "c": "hi", "k": "message"})
            posted.append(body["postMessage"]["id"])
            try:
                added = (await sub.next(timeout=0.5))["sessionEvents"]
                break
            except TimeoutError:
                continue
        assert added["kind"] == "ADDED"
        assert added["message"]["id"] in posted
        assert added["projection"]["pendingAction"] is None  # explicit null: clean
        await admin.execute(DELETE, {"m": added["message"]["id"]})
        deleted = (await sub.next())["sessionEvents"]
        while deleted["kind"] != "DELETED":  # a late event of an earlier attempt
            deleted = (await sub.next())["sessionEvents"]
        assert deleted["message"] is None
        assert deleted["messageId"] == added["message"]["id"]


@pytest.fixture(scope="module")
def redis_pair(request: pytest.FixtureRequest) -> Iterator[tuple[Server, Server]]:
    bus = redis_url()
    request.getfixturevalue("pg_url")
    with server_pair("postgresql", broadcast_url=f"{bus.rsplit('/', 1)[0]}/0") as pair:
        yield pair


async def test_a_change_made_through_one_process_reaches_subscribers_of_the_other(
    redis_pair: tuple[Server, Server],
) -> None:
    a, b = (Client(s.base_url, ADMIN_TOKEN) for s in redis_pair)
    try:
        task_id, session_id = await running_session(a)
        async with (
            b.subscribe(PROJECTIONS, {"t": task_id}) as projections,
            b.subscribe(SESSION_EVENTS, {"s": session_id}) as events,
        ):
            assert (await projections.next())["pendingActionChanged"]["pendingAction"] is None
            # sessionEvents sends no snapshot: post until one event arrives, so it is surely attached.
            for _ in range(20):
                await a.execute(POST, {"s": session_id, "c": "hello", "k": "message"})
                try:
                    await events.next(timeout=0.5)
                    break
                except TimeoutError:
                    continue
            await a.execute(POST, {"s": session_id, "c": "may I?", "k": "permission_request"})
            changed = (await projections.next())["pendingActionChanged"]
            while changed["pendingAction"] is None:  # the warm-up messages' own (clean) changes
                changed = (await projections.next())["pendingActionChanged"]
            while True:
                event = (await events.next())["sessionEvents"]
                if event["message"] and event["message"]["content"] == "may I?":
                    break
        assert changed["pendingAction"] == "PERMISSION"
        assert event["kind"] == "ADDED"
        assert event["projection"]["pendingAction"] == "PERMISSION"
    finally:
        await a.aclose()
        await b.aclose()


@pytest.fixture(scope="module")
def limited_server() -> Iterator[Server]:
    limits = {
        "TURNWISE_SUBSCRIPTIONS_PER_CONNECTION": "2",
        "TURNWISE_MAX_QUERY_BYTES": "2000",
        "TURNWISE_MAX_QUERY_DEPTH": "4",
        "TURNWISE_ALLOWED_ORIGINS": "http://app.example",
        "TURNWISE_WS_COMPRESSION": "1",
    }
    with served("sqlite", env=limits) as srv:
        yield srv


@pytest.fixture
async def limited_admin(limited_server: Server) -> AsyncIterator[Client]:
    async with contextlib.aclosing(Client(limited_server.base_url, ADMIN_TOKEN)) as client:
        yield client


async def test_oversized_and_too_deep_documents_are_refused(limited_admin: Client) -> None:
    with pytest.raises(GraphQLError) as big:
        await limited_admin.execute("{ tasks { id } }" + " " * 3000)
    assert big.value.codes == ["QUERY_TOO_LARGE"]
    with pytest.raises(GraphQLError, match="exceeds maximum operation depth"):
        await limited_admin.execute(
            "{ tasks { sessions { activeClarification { questions { options { id } } } } } }"
        )


async def _negotiated_extensions(srv: Server) -> str | None:
    """What the server accepts of a client that offers permessage-deflate (as browsers do)."""
    url = srv.base_url.replace("http", "ws", 1) + "/graphql"
    async with websockets.connect(
        url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")], compression="deflate"
    ) as ws:
        assert ws.response is not None
        return ws.response.headers.get("Sec-WebSocket-Extensions")


async def test_websocket_compression_is_off_by_default_and_on_when_configured(
    server: Server, limited_server: Server
) -> None:
    assert await _negotiated_extensions(server) is None
    assert "permessage-deflate" in (await _negotiated_extensions(limited_server) or "")


async def ws_connect(srv: Server, origin: str | None, host: str | None = None) -> Connection:
    headers = {} if origin is None else {"Origin": origin}
    if host is not None:
        headers["Host"] = host
    url = srv.base_url.replace("http", "ws", 1) + "/graphql"
    return await Connection.open(url, ADMIN_TOKEN, headers=headers)


async def test_websocket_origins_same_origin_and_allowed_pass_others_are_refused(
    limited_server: Server,
) -> None:
    for origin in (limited_server.base_url, "http://app.example", None):
        connection = await ws_connect(limited_server, origin)
        await connection.close()
    with pytest.raises(websockets.InvalidStatus) as refused:
        await ws_connect(limited_server, "http://evil.example")
    assert refused.value.response.status_code == 403


async def _handshake_status(srv: Server, host: str, origin: str | None) -> int:
    """The status of a raw WebSocket handshake naming this Host (a client library sets its own)."""
    parts = urlsplit(srv.base_url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    lines = [
        "GET /graphql HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: graphql-transport-ws",
        *([] if origin is None else [f"Origin: {origin}"]),
    ]
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = await asyncio.wait_for(reader.readline(), 10)
        return int(status_line.split()[1])
    finally:
        writer.close()


async def test_a_websocket_page_whose_name_was_rebound_here_is_refused(server: Server) -> None:
    # A page of rebound.example whose name now resolves to this machine is its own origin: the
    # origin matches the Host it sends, so only the host check tells it from this server's own pages.
    assert await _handshake_status(server, "rebound.example:8000", "http://rebound.example:8000") == 403
    # An agent (no Origin) may name any host; this server's own page passes.
    own = urlsplit(server.base_url).netloc
    assert await _handshake_status(server, "rebound.example:8000", None) == 101
    assert await _handshake_status(server, own, server.base_url) == 101


async def test_a_connection_holds_at_most_the_configured_number_of_subscriptions(
    limited_server: Server, limited_admin: Client
) -> None:
    task_id, _ = await running_session(limited_admin)
    connection = await ws_connect(limited_server, None)
    try:
        subs = [await connection.subscribe(PROJECTIONS, {"t": task_id}) for _ in range(3)]
        # The first two are served (their snapshot arrives); the third is refused with an error.
        for sub in subs[:2]:
            assert (await sub.next(timeout=10))["pendingActionChanged"]["sessionId"]
        with pytest.raises(GraphQLRequestError):
            await subs[2].next(timeout=10)
    finally:
        await connection.close()


async def _direct_sends(srv: Server) -> float:
    async with httpx.AsyncClient(base_url=srv.base_url) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("turnwise_live_direct_sends_total "):
            return float(line.split()[1])
    raise AssertionError("no turnwise_live_direct_sends_total in /metrics")


async def _raw_subscription(srv: Server, variables: dict[str, Any]) -> Any:
    url = srv.base_url.replace("http", "ws", 1) + "/graphql"
    ws = await websockets.connect(url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")])
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {ADMIN_TOKEN}"}}
    await ws.send(json.dumps(init))
    assert json.loads(await ws.recv())["type"] == "connection_ack"
    payload = {"query": PROJECTIONS, "variables": variables}
    await ws.send(json.dumps({"id": "op-1", "type": "subscribe", "payload": payload}))
    return ws


@pytest.fixture(scope="module")
def unadapted_server() -> Iterator[Server]:
    with served("sqlite", env={"TURNWISE_WS_ADAPTER": "0"}) as srv:
        yield srv


async def test_changes_reach_idle_subscriptions_directly_as_the_very_messages_strawberry_sends(
    server: Server, admin: Client
) -> None:
    """Every subscription of a task gets every change, in revision order, each as the `next` message
    Strawberry sends for it (the exact text of encoding that message), sent without waking the
    subscription once it is idle (the process counts those sends)."""
    assert await _changes_reach_every_subscription(server, admin) == 9


async def test_with_the_adapter_off_every_change_goes_through_the_subscription_itself(
    unadapted_server: Server,
) -> None:
    async with contextlib.aclosing(Client(unadapted_server.base_url, ADMIN_TOKEN)) as admin:
        assert await _changes_reach_every_subscription(unadapted_server, admin) == 0


async def _changes_reach_every_subscription(server: Server, admin: Client) -> float:
    """Three subscriptions of a task, three changes: what each receives, checked; the direct sends."""
    task_id, session_id = await running_session(admin)
    sockets = [await _raw_subscription(server, {"t": task_id}) for _ in range(3)]
    try:
        snapshots = [json.loads(await ws.recv()) for ws in sockets]  # through the subscription itself
        assert {s["payload"]["data"]["pendingActionChanged"]["sessionId"] for s in snapshots} == {session_id}
        before = await _direct_sends(server)
        for kind in ("permission_request", "message", "permission_request"):
            await admin.execute(POST, {"s": session_id, "c": kind, "k": kind})
        texts = [[await asyncio.wait_for(ws.recv(), 10) for _ in range(3)] for ws in sockets]
        assert texts[0] == texts[1] == texts[2]
        sequences = []
        for text in texts[0]:
            message = json.loads(text)
            assert text == jsoncodec.dumps(message)  # framed exactly as encoding the whole message
            assert list(message) == ["id", "type", "payload"]
            assert (message["id"], message["type"], list(message["payload"])) == ("op-1", "next", ["data"])
            change = message["payload"]["data"]["pendingActionChanged"]
            assert list(change) == ["sessionId", "pendingAction", "revision"]
            sequences.append(int(change["revision"]["sequence"]))
        assert sequences == sorted(sequences)
        assert len(set(sequences)) == 3
        return await _direct_sends(server) - before
    finally:
        for ws in sockets:
            await ws.close()
