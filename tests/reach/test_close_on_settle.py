"""A shown notification closes however its action stops being pending: skipped, superseded by a
newer turn, expired with its session, cancelled by the agent (answered: see test_reach.py). A real
`turnwise serve` pushes to a local push service that checks VAPID and decrypts; one server per
dialect serves the module, each test with a task, a person, an agent and a device of its own."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.api.client import Client
from tests.api.gql import GRANT, SET_STATE, START, running_session, token_for
from tests.dialects import served
from tests.reach.receivers import PushService, push_service
from tests.servers import ADMIN_TOKEN, Server

ENV = {
    "TURNWISE_NOTIFY_AFTER_SECONDS": "0.2",
    "TURNWISE_NOTIFY_POLL_SECONDS": "0.1",
    "TURNWISE_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1",
}
REGISTER = """mutation($e: String!, $k: String!, $a: String!) {
  registerPushSubscription(endpoint: $e, p256dh: $k, auth: $a) }"""
ASK = """subscription($s: ID!, $t: Float) {
  askClarification(sessionId: $s, timeoutSeconds: $t,
    questions: [{prompt: "Ship it?", options: [{label: "Yes"}, {label: "No"}]}]) {
    __typename ... on ClarificationAsked { bundle { pendingId } } } }"""
ASK_PERMISSION = """subscription($s: ID!, $t: Float) {
  askPermission(sessionId: $s, toolName: "Bash", input: {command: "make deploy"}, timeoutSeconds: $t) {
    __typename ... on PermissionAsked { request { pendingId } } } }"""
SKIP = "mutation($p: ID!) { respondToClarification(pendingId: $p, rejected: true) { __typename } }"
CANCEL = "mutation($p: ID!) { cancelClarification(pendingId: $p) }"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with served(str(request.param), request, env=ENV) as found:
        yield found


@dataclass
class Scene:
    admin: Client
    person: Client
    agent: Client
    session_id: str
    phone: PushService
    stack: contextlib.AsyncExitStack

    async def ask(self, kind: str, *, live: bool) -> str:
        """The agent asks; `live`: it keeps waiting (else it detaches at once). The pending id."""
        query, field, holder = (
            (ASK, "askClarification", "bundle")
            if kind == "clarification"
            else (ASK_PERMISSION, "askPermission", "request")
        )
        variables = {"s": self.session_id, "t": None if live else 0.2}
        sub = await self.stack.enter_async_context(self.agent.subscribe(query, variables))
        pending_id = str((await sub.next())[field][holder]["pendingId"])
        if not live:
            await sub.next(timeout=10)  # detached
        return pending_id


@pytest.fixture
async def scene(server: Server) -> AsyncIterator[Scene]:
    tag = uuid.uuid4().hex[:8]
    admin = Client(server.base_url, ADMIN_TOKEN)
    _task_id, session_id = await running_session(admin, title="Release 2.4")
    user_id, user_token = await token_for(admin, "user", name=f"dana-{tag}")
    await admin.execute(GRANT, {"u": user_id, "t": _task_id})
    _, agent_token = await token_for(admin, "agent", name=f"agent-{tag}", session_id=session_id)
    person = Client(server.base_url, user_token)
    agent = Client(server.base_url, agent_token)
    try:
        with push_service() as phone:
            browser = phone.browser
            variables = {"e": phone.endpoint, "k": browser.p256dh, "a": browser.auth_secret}
            assert await person.execute(REGISTER, variables) == {"registerPushSubscription": True}
            async with contextlib.AsyncExitStack() as stack:
                yield Scene(admin, person, agent, session_id, phone, stack)
    finally:
        for client in (agent, person, admin):
            await client.aclose()


async def skipped(scene: Scene, pending_id: str) -> None:
    done = await scene.person.execute(SKIP, {"p": pending_id})
    assert done["respondToClarification"]["__typename"] == "ClarificationResponded"


async def superseded(scene: Scene, _pending_id: str) -> None:
    await scene.admin.execute(START, {"s": scene.session_id})  # a newer turn starts


async def expired(scene: Scene, _pending_id: str) -> None:
    await scene.admin.execute(SET_STATE, {"s": scene.session_id, "st": "COMPLETED"})


async def cancelled(scene: Scene, pending_id: str) -> None:
    assert (await scene.agent.execute(CANCEL, {"p": pending_id}))["cancelClarification"] is True


Settle = Callable[[Scene, str], Awaitable[None]]


async def pushed(phone: PushService, pending_id: str, kind: str) -> dict[str, Any]:
    for _ in range(200):
        for payload in phone.received.now():
            if payload["pendingId"] == pending_id and payload["type"] == kind:
                return dict(payload)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} push for {pending_id}: {phone.received.now()}")


@pytest.mark.parametrize(
    ("kind", "settle"),
    [
        pytest.param("clarification", skipped, id="clarification-skipped"),
        pytest.param("clarification", superseded, id="clarification-superseded"),
        pytest.param("clarification", expired, id="clarification-expired"),
        pytest.param("clarification", cancelled, id="clarification-cancelled"),
        pytest.param("permission", superseded, id="permission-superseded"),
        pytest.param("permission", expired, id="permission-expired"),
        pytest.param("permission", cancelled, id="permission-cancelled"),
    ],
)
async def test_the_notification_closes_once_the_action_is_settled(
    scene: Scene, kind: str, settle: Settle
) -> None:
    # Only an agent still waiting can cancel; the other ways settle a detached action.
    pending_id = await scene.ask(kind, live=settle is cancelled)
    shown = await pushed(scene.phone, pending_id, "pending")
    assert shown["kind"] == kind
    await settle(scene, pending_id)
    assert await pushed(scene.phone, pending_id, "close") == {"type": "close", "pendingId": pending_id}
    await asyncio.sleep(0.5)  # several polls of the worker: nothing more
    assert [p["type"] for p in scene.phone.received.now()] == ["pending", "close"]
