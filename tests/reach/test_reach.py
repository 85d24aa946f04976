"""Reach end to end: a real `turnwise serve` tells people of pending actions through real receivers on
this machine (a Web Push endpoint that checks VAPID and decrypts, an Apprise json:// webhook, an SMTP
server), once per destination, after TURNWISE_NOTIFY_AFTER_SECONDS, across restarts and workers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import notification_outbox
from backend.domain.ids import new_id
from backend.services.container import Services
from backend.services.context import Deps
from tests.api.client import Client, GraphQLError
from tests.api.gql import GRANT, running_session, token_for
from tests.conftest import redis_url
from tests.lifecycle.support import Agent
from tests.reach.receivers import (
    Browser,
    PushService,
    Received,
    json_channel,
    push_service,
    smtp_server,
    webhook,
)
from tests.reach.support import PUBLIC, StartServer, people
from tests.servers import ADMIN_TOKEN, Server, free_port

ASK = """subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $t: Float) {
  askClarification(sessionId: $s, questions: $q, timeoutSeconds: $t) {
    __typename ... on ClarificationAsked { bundle { pendingId } } } }"""
ASK_PERMISSION = """subscription($s: ID!) {
  askPermission(sessionId: $s, toolName: "Bash", input: {command: "make deploy"}, timeoutSeconds: 0.2) {
    __typename ... on PermissionAsked { request { pendingId } } } }"""
ANSWER = """mutation($p: ID!) { respondToClarification(pendingId: $p,
  answers: [{questionId: "q1", selectedOptionIds: ["q1_opt2"]}]) { __typename } }"""
ADD_CHANNEL = """mutation($u: String!, $l: String) { addNotificationChannel(url: $u, label: $l) {
  id label target } }"""
CHANNELS = "{ notificationChannels { id label target } }"
REMOVE_CHANNEL = "mutation($c: ID!) { removeNotificationChannel(channelId: $c) }"
REGISTER = """mutation($e: String!, $k: String!, $a: String!) {
  registerPushSubscription(endpoint: $e, p256dh: $k, auth: $a) }"""
PUSH_CONFIG = "{ pushConfig { vapidPublicKey } }"
QUESTION = {"prompt": "Deploy to staging now?", "options": [{"label": "Yes"}, {"label": "Not yet"}]}


async def ask(server: Server, token: str, session_id: str, *, wait: float = 0.2) -> str:
    """The agent asks and detaches at once (the question stays open)."""
    agent = Client(server.base_url, token)
    try:
        async with agent.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": wait}) as sub:
            asked = (await sub.next())["askClarification"]
            pending_id = str(asked["bundle"]["pendingId"])
            await sub.next(timeout=10)  # detached
        return pending_id
    finally:
        await agent.aclose()


async def register(person: Client, service: PushService) -> None:
    browser = service.browser
    ok = await person.execute(
        REGISTER, {"e": service.endpoint, "k": browser.p256dh, "a": browser.auth_secret}
    )
    assert ok == {"registerPushSubscription": True}


async def settle(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def test_a_question_reaches_a_phone_a_chat_and_a_mailbox_once_and_its_push_closes_when_answered(
    dialect: str, start: StartServer
) -> None:
    server = await start(dialect)
    with (
        json_channel() as (hook, chat),
        smtp_server() as (smtp_port, mail),
        push_service() as phone,
    ):
        async with people(server) as (admin, person, task_id, session_id, agent_token):
            key = (await person.execute(PUSH_CONFIG))["pushConfig"]["vapidPublicKey"]
            assert len(key) == 87  # an uncompressed P-256 point, URL-safe base64
            await register(person, phone)
            added = await person.execute(
                ADD_CHANNEL, {"u": f"json://bot:s3cret@{hook}/hook", "l": "team chat"}
            )
            assert added["addNotificationChannel"]["label"] == "team chat"
            mailto = (
                f"mailto://127.0.0.1:{smtp_port}/?from=turnwise@example.com&to=dana@example.com&pass=pa55word"
            )
            await person.execute(ADD_CHANNEL, {"u": mailto, "l": None})
            listed = (await person.execute(CHANNELS))["notificationChannels"]
            assert [c["label"] for c in listed] == ["team chat", "mailto"]
            assert all("pa55word" not in c["target"] and "s3cret" not in c["target"] for c in listed), listed
            assert (await admin.execute(CHANNELS))["notificationChannels"] == []  # one's own only

            started_at = time.monotonic()
            pending_id = await ask(server, agent_token, session_id)
            (pushed,) = await asyncio.to_thread(phone.received.wait, 1)
            (message,) = await asyncio.to_thread(chat.wait, 1)
            (letter,) = await asyncio.to_thread(mail.wait, 1)
            assert time.monotonic() - started_at < 0.3 + 5
            link = f"{PUBLIC}/t/{task_id}/s/{session_id}"
            assert pushed == {
                "type": "pending",
                "kind": "clarification",
                "pendingId": pending_id,
                "taskId": task_id,
                "sessionId": session_id,
                "url": f"/t/{task_id}/s/{session_id}",
                "title": "Release 2.4: a question for you",
                "body": "Deploy to staging now?",
                "actions": [
                    {"action": "option:q1_opt1", "title": "Yes"},
                    {"action": "option:q1_opt2", "title": "Not yet"},
                ],
            }
            for text in (message["message"], letter["body"]):
                for part in ("Release 2.4", "Deploy to staging now?", "Yes, Not yet", link):
                    assert part in text, text
            assert letter["to"] == ["dana@example.com"]

            assert (await person.execute(ANSWER, {"p": pending_id}))["respondToClarification"][
                "__typename"
            ] == ("ClarificationResponded")
            _, closed = await asyncio.to_thread(phone.received.wait, 2)
            assert closed == {"type": "close", "pendingId": pending_id}
            await settle(1.0)
            assert len(phone.received.now()) == 2
            assert len(chat.now()) == 1
            assert len(mail.now()) == 1
        assert "s3cret" not in server.log()
        assert "pa55word" not in server.log()


async def test_an_approval_carries_allow_and_deny(dialect: str, start: StartServer) -> None:
    server = await start(dialect)
    with push_service() as phone:
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await register(person, phone)
            agent = Client(server.base_url, agent_token)
            try:
                async with agent.subscribe(ASK_PERMISSION, {"s": session_id}) as sub:
                    pending_id = (await sub.next())["askPermission"]["request"]["pendingId"]
                    await sub.next(timeout=10)
            finally:
                await agent.aclose()
            (pushed,) = await asyncio.to_thread(phone.received.wait, 1)
            assert (pushed["kind"], pushed["pendingId"]) == ("permission", pending_id)
            assert pushed["title"] == "Release 2.4: may the agent use Bash?"
            assert pushed["body"] == "make deploy"
            assert [a["action"] for a in pushed["actions"]] == ["allow", "deny"]


async def test_an_action_settled_before_its_time_sends_nothing(dialect: str, start: StartServer) -> None:
    server = await start(dialect, {"TURNWISE_NOTIFY_AFTER_SECONDS": "1.5"})
    with json_channel() as (hook, chat):
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await person.execute(ADD_CHANNEL, {"u": f"json://{hook}/", "l": "chat"})
            pending_id = await ask(server, agent_token, session_id)
            await person.execute(ANSWER, {"p": pending_id})
            await settle(2.5)
            assert chat.now() == []


async def test_a_private_target_is_refused_and_nothing_is_stored(dialect: str, start: StartServer) -> None:
    server = await start(dialect, {"TURNWISE_OUTBOUND_ALLOWED_HOSTS": ""})
    async with people(server) as (_, person, *_rest):
        for url in (
            "json://127.0.0.1:9/hook",
            "json://localhost/hook",
            "jsons://10.1.2.3/x",
            "json://[::1]:80/",
            # Every scheme's host is checked, not only the webhooks' (tests/reach/test_guard.py).
            "hassio://127.0.0.1/accesstoken",
            "kodi://10.0.0.5",
            "rsyslog://127.0.0.1",
            "bark://127.0.0.1/dev",
            "signal://127.0.0.1:8080/12345678901/12345678902",
        ):
            with pytest.raises(GraphQLError) as refused:
                await person.execute(ADD_CHANNEL, {"u": url, "l": None})
            assert refused.value.codes == ["BAD_USER_INPUT"]
            assert "TURNWISE_OUTBOUND_ALLOWED_HOSTS" in str(refused.value)
        with pytest.raises(GraphQLError) as refused:
            await person.execute(
                REGISTER, {"e": "https://169.254.169.254/latest", "k": "B" + "A" * 86, "a": "A" * 22}
            )
        assert refused.value.codes == ["BAD_USER_INPUT"]
        for url, why in (
            ("carrier-pigeon://coop/1", "not an Apprise URL"),
            ("syslog://", "names no host"),
            ("json://turnwise.example/hook?redirect=yes", "redirect"),
        ):
            with pytest.raises(GraphQLError) as unknown:
                await person.execute(ADD_CHANNEL, {"u": url, "l": None})
            assert unknown.value.codes == ["BAD_USER_INPUT"]
            assert why in str(unknown.value)
        assert (await person.execute(CHANNELS))["notificationChannels"] == []


async def test_a_subscription_the_push_service_calls_gone_is_removed(
    dialect: str, start: StartServer
) -> None:
    server = await start(dialect)
    with push_service() as phone:
        phone.status = 410
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await register(person, phone)
            await ask(server, agent_token, session_id)
            await asyncio.to_thread(phone.asked.wait, 1)  # the service was asked once, and said 410
            phone.status = 201
            await ask(server, agent_token, session_id)
            await settle(1.5)
            assert phone.received.now() == []  # no subscription left to push to


async def test_a_restart_between_the_ask_and_the_send_loses_nothing_and_sends_once(
    dialect: str, start: StartServer
) -> None:
    env = {"TURNWISE_NOTIFY_AFTER_SECONDS": "1.0"}
    server = await start(dialect, env)
    with json_channel() as (hook, chat):
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await person.execute(ADD_CHANNEL, {"u": f"json://{hook}/", "l": "chat"})
            pending_id = await ask(server, agent_token, session_id)
        await asyncio.to_thread(server.kill)  # before the row was due
        await start(env=env, url=server.database_url)
        (message,) = await asyncio.to_thread(chat.wait, 1)
        assert "Deploy to staging now?" in message["message"]
        await settle(1.5)
        assert len(chat.now()) == 1
        assert pending_id


@pytest.mark.pg
@pytest.mark.usefixtures("pg_url")
async def test_two_workers_send_each_row_once(start: StartServer) -> None:
    env = {"TURNWISE_NOTIFY_AFTER_SECONDS": "0.5"}
    first = await start("postgresql", env)
    second = await start(env=env, url=first.database_url)
    with json_channel() as (hook, chat):
        received: Received = chat
        admin = Client(first.base_url, ADMIN_TOKEN)
        user_id, user_token = await token_for(admin, "user", name="dana")
        person = Client(first.base_url, user_token)
        await person.execute(ADD_CHANNEL, {"u": f"json://{hook}/", "l": "chat"})
        asked: list[str] = []
        for i in range(6):
            task_id, session_id = await running_session(admin, title=f"task {i}")
            await admin.execute(GRANT, {"u": user_id, "t": task_id})
            _, token = await token_for(admin, "agent", name=f"agent-{i}", session_id=session_id)
            asked.append(await ask(first if i % 2 else second, token, session_id))
        messages = await asyncio.to_thread(received.wait, len(asked))
        await settle(1.5)
        assert len(received.now()) == len(asked)
        titles = sorted(m["message"].split("\n")[0] for m in messages)
        assert titles == sorted(f"Task: task {i}" for i in range(6))
        await person.aclose()
        await admin.aclose()


async def outbox_rows(url: str) -> list[Any]:
    """The server's outbox, read from its database by this (another) process."""
    db = Database(url)
    try:
        async with db.read() as conn:
            return list(await conn.execute(select(notification_outbox)))
    finally:
        await db.dispose()


async def test_a_push_arrives_within_the_delay_and_a_second_of_the_ask(
    dialect: str, start: StartServer
) -> None:
    after = 1.0
    server = await start(dialect, {"TURNWISE_NOTIFY_AFTER_SECONDS": str(after)})
    with push_service() as phone:
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await register(person, phone)
            agent = Client(server.base_url, agent_token)
            try:
                async with agent.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.2}) as sub:
                    await sub.next()
                    asked_at = time.monotonic()  # the ask has committed (its due time was set before)
                    await asyncio.to_thread(phone.received.wait, 1)
            finally:
                await agent.aclose()
    took = phone.received.times[0] - asked_at
    # TURNWISE_NOTIFY_AFTER_SECONDS + 1 s, with half a second more for a loaded machine.
    assert after - 0.05 <= took <= after + 1.5, took


async def metric(server: Server, name: str) -> float:
    async with httpx.AsyncClient() as http:
        body = (await http.get(f"{server.base_url}/metrics", timeout=5)).text
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_another_process_s_ask_reaches_an_idle_worker_within_a_second_of_its_due_time(
    dialect: str, start: StartServer
) -> None:
    # The server and this process share the database and a bus, as two server processes do. Idle,
    # the server's worker asks nothing of the database; this process then asks (its own worker does
    # not run): its ask writes the rows and wakes the server's worker through the bus, which sends
    # the push at the rows' due time.
    after = 1.0
    bus_url = redis_url()
    # A namespace of its own: the idle count below is not to hear other test runs on the same Redis.
    namespace = f"test-{new_id()}"
    env = {
        "TURNWISE_NOTIFY_AFTER_SECONDS": str(after),
        "TURNWISE_NOTIFY_POLL_SECONDS": "",
        "TURNWISE_BUS_NAMESPACE": namespace,
    }
    server = await start(dialect, env, broadcast_url=bus_url)
    with push_service() as phone:
        async with people(server) as (_, person, _task_id, session_id, _agent_token):
            await register(person, phone)
            await settle(0.5)
            before = await metric(server, "turnwise_db_statements_total")
            await settle(3.0)
            idle = await metric(server, "turnwise_db_statements_total") - before
            # The waiter hub's heartbeat (every 5 s) at most: the worker polled 2 reads a second.
            assert idle <= 2, idle
            db = Database(server.database_url)
            bus = EventBus(bus_url, namespace=namespace)
            await bus.connect()
            settings = Settings(
                database_url=server.database_url, notify_after_seconds=after, bus_namespace=namespace
            )
            other = Services.build(Deps(db=db, bus=bus, settings=settings))
            try:
                agent = await Agent.ask(other, session_id, [QUESTION])
                asked_at = time.monotonic()  # the ask has committed (its due time was set before)
                try:
                    (pushed,) = await asyncio.to_thread(phone.received.wait, 1)
                finally:
                    await agent.close()
            finally:
                await bus.disconnect()
                await db.dispose()
    assert pushed["pendingId"] == agent.pending_id
    took = phone.received.times[0] - asked_at
    # TURNWISE_NOTIFY_AFTER_SECONDS + 1 s, with half a second more for a loaded machine.
    assert after - 0.05 <= took <= after + 1.5, took


async def test_an_ask_never_waits_for_a_dead_push_service_or_webhook(
    dialect: str, start: StartServer
) -> None:
    server = await start(dialect, {"TURNWISE_NOTIFY_AFTER_SECONDS": "0", "TURNWISE_NOTIFY_SEND_SECONDS": "3"})
    with push_service() as hung, webhook() as stuck:
        hung.script.hold.clear()  # both take the request and never answer (until the end)
        stuck.script.hold.clear()
        try:
            async with people(server) as (_, person, _task_id, session_id, agent_token):
                await register(person, hung)
                refused = Browser()  # a push service that is down: nothing listens on its port
                await person.execute(
                    REGISTER,
                    {
                        "e": f"http://127.0.0.1:{free_port()}/push/down",
                        "k": refused.p256dh,
                        "a": refused.auth_secret,
                    },
                )
                await person.execute(ADD_CHANNEL, {"u": f"json://{stuck.address}/hook", "l": "chat"})
                agent = Client(server.base_url, agent_token)
                took = []
                try:
                    for _ in range(3):
                        started = time.monotonic()
                        async with agent.subscribe(ASK, {"s": session_id, "q": [QUESTION], "t": 0.2}) as sub:
                            await sub.next()
                            took.append(time.monotonic() - started)
                            await sub.next(timeout=10)
                        await asyncio.to_thread(hung.asked.wait, 1)  # the worker is stuck on them
                finally:
                    await agent.aclose()
                assert stuck.asked.now() != []
                # Each ask answered long before one send could give up (3 s): it waited for none.
                assert max(took) < 1.0, took
        finally:
            hung.script.hold.set()
            stuck.script.hold.set()


async def test_a_row_a_crashed_process_left_sending_ends_failed_and_is_never_sent_again(
    dialect: str, start: StartServer
) -> None:
    env = {"TURNWISE_NOTIFY_SEND_SECONDS": "2"}  # a claim is the process's for 2 x (2 + 1) s
    server = await start(dialect, env)
    with push_service() as phone:
        phone.script.hold.clear()  # the push service takes the request and holds it ...
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await register(person, phone)
            pending_id = await ask(server, agent_token, session_id)
        await asyncio.to_thread(phone.asked.wait, 1)
        await asyncio.to_thread(server.kill)  # ... while the process dies mid-send
        phone.script.hold.set()
        (row,) = await outbox_rows(server.database_url)
        assert (row.pending_id, row.status) == (pending_id, "sending")
        await start(env=env, url=server.database_url)
        for _ in range(200):
            (row,) = await outbox_rows(server.database_url)
            if row.status != "sending":
                break
            await settle(0.1)
        assert row.status == "failed"
        assert row.last_error == "the sending process stopped before it recorded the outcome"
        await settle(1.0)
        assert len(phone.asked.now()) == 1  # it may have gone out: never twice
        (row,) = await outbox_rows(server.database_url)
        assert (row.status, row.attempts) == ("failed", 1)
