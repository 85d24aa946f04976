"""Reminders and escalation end to end: a real `turnwise serve` reminds a person of an action that
waits for them, then tells their escalation channel (a team chat), through real receivers on this
machine (Apprise json:// webhooks, a Web Push endpoint); once per step and destination, nothing once
the action is settled, across a restart and with two server processes."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from contextlib import aclosing
from typing import Any

import pytest
from sqlalchemy import select

from backend.db.engine import Database
from backend.db.tables import notification_outbox as O
from tests.api.client import Client, GraphQLError
from tests.api.gql import GRANT, running_session, token_for
from tests.api.kinds import API_KINDS, ApiKind
from tests.reach.receivers import Received, json_channel, push_service
from tests.reach.support import StartServer, people
from tests.servers import ADMIN_TOKEN

ADD_CHANNEL = "mutation($u: String!, $l: String) { addNotificationChannel(url: $u, label: $l) { id } }"
REMOVE_CHANNEL = "mutation($c: ID!) { removeNotificationChannel(channelId: $c) }"
REGISTER = """mutation($e: String!, $k: String!, $a: String!) {
  registerPushSubscription(endpoint: $e, p256dh: $k, auth: $a) }"""
FIELDS = "notifyAfterSeconds remindEverySeconds escalateAfterSeconds escalateChannelId"
PREFERENCES = f"{{ notificationPreferences {{ {FIELDS} }} }}"
SET = f"""mutation($n: Float, $r: Float, $e: Float, $c: ID) {{
  setNotificationPreferences(notifyAfterSeconds: $n, remindEverySeconds: $r, escalateAfterSeconds: $e,
    escalateChannelId: $c) {{ {FIELDS} }} }}"""
SET_REMINDERS = (
    f"""mutation($r: Float) {{ setNotificationPreferences(remindEverySeconds: $r) {{ {FIELDS} }} }}"""
)
SET_FIRST = f"""mutation($n: Float) {{ setNotificationPreferences(notifyAfterSeconds: $n) {{ {FIELDS} }} }}"""
FIRST_TITLE = {
    "clarification": "Turnwise: a question for you",
    "permission": "Turnwise: the agent asks to use Bash",
}
SHOWN = {"clarification": "Which database?", "permission": "alembic upgrade head"}
SETTLED = "the action was settled"


async def channel(person: Client, address: str, label: str) -> str:
    added = await person.execute(ADD_CHANNEL, {"u": f"json://{address}/hook", "l": label})
    return str(added["addNotificationChannel"]["id"])


async def outbox(url: str, pending_id: str) -> list[Any]:
    """The action's outbox rows, read from the server's database by this (another) process."""
    db = Database(url)
    try:
        async with db.read() as conn:
            query = select(O).where(O.c.pending_id == pending_id).order_by(O.c.kind, O.c.step, O.c.id)
            return list(await conn.execute(query))
    finally:
        await db.dispose()


def titles(received: Received) -> list[str]:
    return [str(m["title"]) for m in received.now()]


async def quiet(*receivers: Received, seconds: float) -> None:
    """Nothing more arrives at any of them for `seconds`."""
    before = [len(r.now()) for r in receivers]
    await asyncio.sleep(seconds)
    late = [r.now()[n:] for r, n in zip(receivers, before, strict=True)]
    assert late == [[] for _ in receivers], late


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_a_waiting_action_reminds_then_escalates_and_goes_quiet_once_settled(
    dialect: str, kind: ApiKind, start: StartServer
) -> None:
    server = await start(dialect)
    with json_channel() as (mine, chat), json_channel() as (team_hook, team), push_service() as phone:
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await channel(person, mine, "my chat")
            team_id = await channel(person, team_hook, "team chat")
            browser = phone.browser
            await person.execute(
                REGISTER, {"e": phone.endpoint, "k": browser.p256dh, "a": browser.auth_secret}
            )
            chosen = {"n": None, "r": 0.8, "e": 1.5, "c": team_id}
            set_to = (await person.execute(SET, chosen))["setNotificationPreferences"]
            assert set_to == {
                "notifyAfterSeconds": 0.3,  # the server's delay
                "remindEverySeconds": 0.8,
                "escalateAfterSeconds": 1.5,
                "escalateChannelId": team_id,
            }
            agent = Client(server.base_url, agent_token)
            try:
                pending_id = await kind.detached(agent, session_id)
            finally:
                await agent.aclose()
            # The first notice at 0.3 s, reminders at 1.1 and 1.9 s; the escalation at 1.5 s.
            await asyncio.to_thread(chat.wait, 3)
            (escalation,) = await asyncio.to_thread(team.wait, 1)
            await asyncio.to_thread(phone.received.wait, 3)
            assert (await kind.answer(person, pending_id))["__typename"] == kind.responded
            await asyncio.to_thread(phone.received.wait, 4)  # its close
            await quiet(chat, team, phone.received, seconds=1.5)  # past the third reminder's time

        first, *reminders = chat.now()
        assert first["title"] == FIRST_TITLE[kind.name]
        assert [m["title"].split(" (waiting ")[0] for m in reminders] == [
            FIRST_TITLE[kind.name].replace("Turnwise:", "Turnwise reminder:")
        ] * 2
        for message in reminders:
            assert message["message"].startswith("Reminder: still waiting for an answer after "), message
            assert SHOWN[kind.name] in message["message"]
        assert escalation["title"].startswith(
            FIRST_TITLE[kind.name].replace("Turnwise:", "Turnwise escalation:")
        )
        assert re.match(r"Escalation: waiting \d+ s for an answer from dana;", escalation["message"])
        assert SHOWN[kind.name] in escalation["message"]
        pushed = phone.received.now()
        assert [p["type"] for p in pushed] == ["pending", "pending", "pending", "close"]
        assert [p["title"].startswith("Reminder: Release 2.4") for p in pushed[:3]] == [False, True, True]
        assert re.match(r"Waiting \d+ s · ", pushed[1]["body"]), pushed[1]

        rows = await outbox(server.database_url, pending_id)
        sent = Counter((r.kind, r.step, r.destination) for r in rows if r.status == "sent")
        assert sent == {
            ("pending", 0, "channel"): 1,  # my chat's first notice; the team chat's was kept back
            ("pending", 0, "push"): 1,
            ("remind", 1, "channel"): 1,
            ("remind", 1, "push"): 1,
            ("remind", 2, "channel"): 1,
            ("remind", 2, "push"): 1,
            ("escalate", 0, "channel"): 1,
            ("close", 0, "push"): 1,
        }
        kept_back = [r for r in rows if r.kind == "pending" and r.destination_id == team_id]
        assert [r.status for r in kept_back] == ["skipped"]
        # The third reminders were written when the second went out, and dropped once due.
        dropped = [
            (r.step, r.status, r.last_error) for r in rows if r.kind == "remind" and r.status != "sent"
        ]
        assert dropped == [(3, "skipped", SETTLED)] * 2


@pytest.mark.parametrize("kind", API_KINDS, ids=str)
async def test_reminders_go_on_across_a_restart_once_per_step(
    dialect: str, kind: ApiKind, start: StartServer
) -> None:
    server = await start(dialect)
    with json_channel() as (hook, chat):
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await channel(person, hook, "my chat")
            await person.execute(SET_REMINDERS, {"r": 0.6})
            agent = Client(server.base_url, agent_token)
            try:
                pending_id = await kind.detached(agent, session_id)
            finally:
                await agent.aclose()
            await asyncio.to_thread(chat.wait, 2)  # the first notice and the first reminder
        await asyncio.to_thread(server.kill)  # the second reminder is due while no process runs
        again = await start(env={}, url=server.database_url)
        admin = Client(again.base_url, ADMIN_TOKEN)
        try:
            await asyncio.to_thread(chat.wait, 4)  # two more reminders from the new process
            # Answered (by the admin, who sees every task): the reminders stop.
            assert (await kind.answer(admin, pending_id))["__typename"] == kind.responded
            await asyncio.sleep(0.3)  # a reminder claimed just before the answer may still arrive
            await quiet(chat, seconds=1.5)
        finally:
            await admin.aclose()
        rows = await outbox(server.database_url, pending_id)
        by_step = Counter((r.kind, r.step) for r in rows)
        assert all(n == 1 for n in by_step.values()), by_step  # one row per step and destination
        steps = sorted(r.step for r in rows if r.kind == "remind")
        assert steps == list(range(1, len(steps) + 1))
        delivered = [r for r in rows if r.status in ("sent", "sending", "failed")]
        # A row the killed process was sending when it died may have gone out (or not): never twice.
        assert len(chat.now()) <= len(delivered) <= len(chat.now()) + 1
        assert [r.status for r in rows if r.kind == "remind"][-1] == "skipped"


@pytest.mark.pg
@pytest.mark.usefixtures("pg_url")
async def test_two_server_processes_send_each_reminder_and_escalation_once(start: StartServer) -> None:
    # Both look at the outbox every 0.05 s, so they compete for every row.
    env = {"TURNWISE_NOTIFY_IDLE_SECONDS": "0.05"}
    first = await start("postgresql", env)
    second = await start(env=env, url=first.database_url)
    with json_channel() as (hook, chat), json_channel() as (team_hook, team):
        async with aclosing(Client(first.base_url, ADMIN_TOKEN)) as admin:
            user_id, user_token = await token_for(admin, "user", name="dana")
            async with aclosing(Client(second.base_url, user_token)) as person:
                await channel(person, hook, "my chat")
                team_id = await channel(person, team_hook, "team")
                await person.execute(SET, {"n": None, "r": 0.4, "e": 1.0, "c": team_id})
                asked: list[str] = []
                for i in range(4):
                    task_id, session_id = await running_session(admin, title=f"task {i}")
                    await admin.execute(GRANT, {"u": user_id, "t": task_id})
                    _, token = await token_for(admin, "agent", name=f"agent-{i}", session_id=session_id)
                    async with aclosing(Client((first if i % 2 else second).base_url, token)) as agent:
                        asked.append(await API_KINDS[i % 2].detached(agent, session_id))
                await asyncio.to_thread(team.wait, len(asked))
                await asyncio.to_thread(chat.wait, 3 * len(asked))
                for i, pending_id in enumerate(asked):
                    await API_KINDS[i % 2].answer(admin, pending_id)
                await asyncio.sleep(0.3)  # a reminder claimed just before its answer may still arrive
                await quiet(chat, team, seconds=1.2)
        sent = []
        for pending_id in asked:
            sent += [r for r in await outbox(first.database_url, pending_id) if r.status == "sent"]
        assert len(chat.now()) == sum(1 for r in sent if r.kind != "escalate")
        assert len(team.now()) == sum(1 for r in sent if r.kind == "escalate") == len(asked)
        escalated = sorted(m["message"].split("\n")[1] for m in team.now())
        assert escalated == sorted(f"Task: task {i}" for i in range(4))


async def test_a_later_first_notice_is_kept(dialect: str, start: StartServer) -> None:
    server = await start(dialect)
    with json_channel() as (hook, chat):
        async with people(server) as (_, person, _task_id, session_id, agent_token):
            await channel(person, hook, "my chat")
            assert (await person.execute(SET_FIRST, {"n": 1.5}))["setNotificationPreferences"][
                "notifyAfterSeconds"
            ] == 1.5
            agent = Client(server.base_url, agent_token)
            try:
                asked = time.monotonic()
                await ApiKind("clarification", "ClarificationResponded").detached(agent, session_id)
            finally:
                await agent.aclose()
            await asyncio.to_thread(chat.wait, 1)
    assert chat.times[0] - asked >= 1.5 - 0.05  # not at the server's 0.3 s
    assert len(chat.now()) == 1


async def test_preferences_are_checked_whole_and_a_bad_one_changes_nothing(
    dialect: str, start: StartServer
) -> None:
    server = await start(dialect)
    with json_channel() as (hook, _chat):
        async with people(server) as (admin, person, _task_id, _session_id, agent_token):
            defaults = (await person.execute(PREFERENCES))["notificationPreferences"]
            assert defaults == {
                "notifyAfterSeconds": 0.3,
                "remindEverySeconds": None,
                "escalateAfterSeconds": None,
                "escalateChannelId": None,
            }
            team_id = await channel(person, hook, "team")
            admins = await channel(admin, hook, "the admin's")
            good = {"n": 60.0, "r": 600.0, "e": 1800.0, "c": team_id}
            await person.execute(SET, good)
            kept = (await person.execute(PREFERENCES))["notificationPreferences"]
            assert kept == {
                "notifyAfterSeconds": 60.0,
                "remindEverySeconds": 600.0,
                "escalateAfterSeconds": 1800.0,
                "escalateChannelId": team_id,
            }
            for change, field, says in (
                ({"r": -5.0}, "remindEverySeconds", "positive"),
                ({"r": 0.0}, "remindEverySeconds", "positive"),
                ({"n": 0.1}, "notifyAfterSeconds", "at least 0.3 seconds"),
                ({"r": 0.2}, "remindEverySeconds", "at least 0.3 seconds"),
                ({"n": 1e9}, "notifyAfterSeconds", "at most"),
                ({"e": 30.0}, "escalateAfterSeconds", "at least 60 seconds"),
                ({"c": admins}, "escalateChannelId", "one of your notification channels"),
                ({"c": "no-such-channel"}, "escalateChannelId", "one of your notification channels"),
                ({"c": None}, "escalateChannelId", "is needed with escalateAfterSeconds"),
                ({"e": None}, "escalateAfterSeconds", "is needed with escalateChannelId"),
                # Several changes: the good one is not written either.
                ({"r": 900.0, "n": -1.0}, "notifyAfterSeconds", "positive"),
            ):
                mutation, variables = _only(change)
                with pytest.raises(GraphQLError) as refused:
                    await person.execute(mutation, variables)
                assert refused.value.codes == ["BAD_USER_INPUT"], change
                assert f"{field}: " in str(refused.value), str(refused.value)
                assert says in str(refused.value), str(refused.value)
                assert (await person.execute(PREFERENCES))["notificationPreferences"] == kept, change
            # Null clears one: back to its default.
            cleared = await person.execute(SET_FIRST, {"n": None})
            assert cleared["setNotificationPreferences"]["notifyAfterSeconds"] == 0.3
            # Removing the escalation channel ends the escalation (its time stays, and does nothing).
            await person.execute(REMOVE_CHANNEL, {"c": team_id})
            after = (await person.execute(PREFERENCES))["notificationPreferences"]
            assert after["escalateChannelId"] is None
            agent = Client(server.base_url, agent_token)
            try:
                with pytest.raises(GraphQLError) as forbidden:
                    await agent.execute(PREFERENCES)
                assert forbidden.value.codes == ["FORBIDDEN"]
            finally:
                await agent.aclose()


def _only(change: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A mutation that passes exactly the arguments `change` names (an omitted one stays as it is)."""
    names = {
        "n": "notifyAfterSeconds",
        "r": "remindEverySeconds",
        "e": "escalateAfterSeconds",
        "c": "escalateChannelId",
    }
    types = {"n": "Float", "r": "Float", "e": "Float", "c": "ID"}
    declared = ", ".join(f"${k}: {types[k]}" for k in change)
    passed = ", ".join(f"{names[k]}: ${k}" for k in change)
    return f"mutation({declared}) {{ setNotificationPreferences({passed}) {{ {FIELDS} }} }}", change
