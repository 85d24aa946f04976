"""The notification outbox's worker, run in this process over a real database (SQLite and PostgreSQL)
and real receivers on this machine: retries with backoff up to the deadline, closes for every device
that was shown an action once it is settled for good (past the first page of the walk, for a push
still being sent, never for a claimed delivery), redirects never followed, the target checked again
before each send, and finished rows pruned.

The actions are seeded as the ask writes them (a pending row in the session's current turn, and the
outbox rows of `enqueue_ask`; a running worker woken for them as the ask wakes it); how an action
settles is written to its row as the services would."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from backend.db.engine import Database, utcnow
from backend.db.tables import notification_outbox as O
from backend.db.tables import task_session_messages as M
from backend.domain.ids import new_id
from backend.domain.lifecycle import INTENT_KEY
from backend.domain.states import MESSAGE_KIND_CLARIFICATION
from backend.repository import access, message_fields, messages, tasks, turns
from backend.repository import reach as repo
from backend.services.reach import Reach
from tests.reach.receivers import PushService, eventually, push_service, webhook
from tests.services.support import services_for

QUESTION = {
    "id": "q1",
    "prompt": "Deploy to staging now?",
    "options": [{"id": "q1_opt1", "label": "Yes"}, {"id": "q1_opt2", "label": "Not yet"}],
    "multi_select": False,
}


@asynccontextmanager
async def worker(db: Database, *, run: bool = False, **settings: Any) -> AsyncIterator[Reach]:
    """This process's notification worker on `db`, sending to 127.0.0.1; `run`: its loop runs (else
    the test drives it with `run_once`)."""
    values: dict[str, Any] = {
        "notify_after_seconds": 0.0,
        "notify_poll_seconds": 0.05,
        "outbound_allowed_hosts": ("127.0.0.1",),
        **settings,
    }
    async with services_for(db, **values) as services:
        await services.reach.start(worker=run)
        try:
            yield services.reach
        finally:
            await services.reach.stop()


async def passes(reach: Reach, done: Callable[[], bool], *, most: int = 40) -> None:
    """Run the worker's passes until `done()` (each pass as the loop would, without its waits)."""
    for _ in range(most):
        await reach.run_once()
        if done():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the worker did not get there")


async def person(db: Database) -> str:
    async with db.write() as conn:
        return (await access.create_user(conn, f"dana-{new_id()}", "admin")).id


async def subscribe(db: Database, user_id: str, service: PushService) -> None:
    browser = service.browser
    async with db.write() as conn:
        await repo.save_push_subscription(
            conn, user_id, service.endpoint, browser.p256dh, browser.auth_secret
        )


async def add_channel(db: Database, user_id: str, url: str) -> None:
    """Stored as `addNotificationChannel` stores it (checked then, or not: see the test)."""
    async with db.write() as conn:
        await repo.add_channel(conn, user_id, url, "chat")


@dataclass(frozen=True)
class Action:
    pending_id: str
    task_id: str
    session_id: str
    message_id: str


async def action(
    db: Database, pending_id: str | None = None, *, deadline: float = 60.0, waking: Reach | None = None
) -> Action:
    """A pending question, and its outbox rows due now (one per destination of whoever sees it);
    `waking`: a running worker woken for them once committed, as the ask would."""
    pending_id = pending_id or new_id()
    async with db.write() as conn:
        task = await tasks.create_task(conn, "Release 2.4")
        session = await tasks.create_session(conn, task.id, is_primary=True, input_capable=True)
        await tasks.set_session_state(conn, session.id, "WAITING_FOR_INPUT")
        turn = await turns.insert_turn(conn, session.id, {})
        row = await messages.insert_message(
            conn,
            session_id=session.id,
            turn_id=turn.id,
            kind=MESSAGE_KIND_CLARIFICATION,
            author="agent",
            content=str(QUESTION["prompt"]),
            metadata={
                "pending_id": pending_id,
                "question_id": "q1",
                "question": QUESTION,
                "question_index": 0,
                "question_total": 1,
                "status": "pending",
                "agent_disconnected": True,
                "requests_input": True,
            },
        )
        now = utcnow()
        await repo.enqueue_ask(
            conn,
            pending_id=pending_id,
            task_id=task.id,
            session_id=session.id,
            outbox=repo.AskOutbox(now, now + dt.timedelta(seconds=deadline), now),
        )
    if waking is not None:
        waking.wake_at(now)
    return Action(pending_id, task.id, session.id, row.id)


async def change(db: Database, found: Action, **metadata: Any) -> None:
    """Rewrite the action's row as a service would: answered, claimed, restored (`metadata` names
    fields as the domain does; None removes one)."""
    async with db.write() as conn:
        row = (await conn.execute(select(*message_fields.COLUMNS).where(M.c.id == found.message_id))).one()
        current = message_fields.metadata_of(row._mapping, where=found.message_id)
        updated = {k: v for k, v in {**current, **metadata}.items() if v is not None}
        values = message_fields.values_of(updated)
        await conn.execute(update(M).where(M.c.id == found.message_id).values(values))


async def outbox(db: Database, pending_id: str | None = None) -> list[Any]:
    query = select(O).order_by(O.c.created_at, O.c.id)
    if pending_id is not None:
        query = query.where(O.c.pending_id == pending_id)
    async with db.read() as conn:
        return list(await conn.execute(query))


async def recorded(db: Database, pending_id: str, *statuses: str, seconds: float = 10.0) -> list[Any]:
    """The action's rows, once every one is in one of `statuses` (its outcome written)."""
    deadline = time.monotonic() + seconds
    while True:
        rows = await outbox(db, pending_id)
        if rows and all(r.status in statuses for r in rows):
            return rows
        assert time.monotonic() < deadline, [(r.destination, r.status) for r in rows]
        await asyncio.sleep(0.05)


def kinds(service: PushService) -> list[tuple[str, str]]:
    return [(p["type"], p["pendingId"]) for p in service.received.now()]


# --- retries ---------------------------------------------------------------------------------------


async def test_a_failing_receiver_is_retried_with_backoff_until_it_takes_the_message(db: Database) -> None:
    with push_service() as phone, webhook() as chat:
        phone.script.first = [503, 503]
        chat.script.first = [500, 500]
        user_id = await person(db)
        await subscribe(db, user_id, phone)
        await add_channel(db, user_id, f"json://{chat.address}/hook")
        async with worker(db, run=True, notify_backoff_seconds=0.2, notify_retry_seconds=30) as reach:
            asked = await action(db, waking=reach)
            (pushed,) = await asyncio.to_thread(phone.received.wait, 1)
            (message,) = await asyncio.to_thread(chat.received.wait, 1)
            rows = await recorded(db, asked.pending_id, "sent")
        assert pushed["pendingId"] == asked.pending_id
        assert "Deploy to staging now?" in message["message"]
        for receiver in (phone.asked, chat.asked):
            first, second, third = receiver.times
            # 0.2 s, then twice that (a little less allowed for the clock of the row's due time)
            assert second - first >= 0.15, receiver.times
            assert third - second >= 0.35, receiver.times
        assert {r.destination: r.attempts for r in rows} == {"push": 3, "channel": 3}


async def test_a_receiver_that_always_fails_ends_failed_at_the_deadline_and_is_left_alone(
    db: Database,
) -> None:
    with push_service() as phone, webhook() as chat:
        phone.status = 503
        chat.script.status = 500
        user_id = await person(db)
        await subscribe(db, user_id, phone)
        await add_channel(db, user_id, f"json://{chat.address}/hook")
        async with worker(db, run=True, notify_backoff_seconds=0.2, notify_retry_seconds=1.0) as reach:
            asked = await action(db, deadline=1.0, waking=reach)

            rows = await recorded(db, asked.pending_id, "failed", seconds=5)
            ended = utcnow()
            await asyncio.sleep(0.6)  # longer than the next backoff would have been
        attempts = {}
        for row in rows:
            assert row.last_error.startswith("gave up: "), row.last_error
            # Tried at 0, 0.2 and 0.6 s (on a loaded machine maybe once less); the next try (at
            # 1.4 s) would pass the deadline (1 s).
            assert 2 <= row.attempts <= 3, row
            assert ended <= row.deadline_at + dt.timedelta(seconds=0.5)
            attempts[row.destination] = row.attempts
        assert len(phone.asked.now()) == attempts["push"]
        assert len(chat.asked.now()) == attempts["channel"]
        assert phone.received.now() == []
        assert chat.received.now() == []


# --- closes ----------------------------------------------------------------------------------------


async def test_every_shown_action_settled_gets_its_close_however_many_are_open(db: Database) -> None:
    with push_service() as phone:
        user_id = await person(db)
        await subscribe(db, user_id, phone)
        async with worker(db) as reach:
            reach.close_scan = 2  # pages of two: the open ones fill the first page
            actions = [await action(db, f"p{i}") for i in range(1, 6)]
            await passes(reach, lambda: len(phone.received.now()) == 5)
            settled = actions[2:]
            for found in settled:
                await change(db, found, status="answered")
            expected = {("close", a.pending_id) for a in settled}
            await passes(reach, lambda: set(kinds(phone)) >= expected)
            for _ in range(5):  # more walks: the open ones stay shown
                await reach.run_once()
        closes = [k for k in kinds(phone) if k[0] == "close"]
        assert sorted(closes) == sorted(expected)


async def test_a_push_still_being_sent_when_its_action_settles_gets_its_own_close(db: Database) -> None:
    with push_service() as laptop, push_service() as phone:
        phone.script.first = [503]  # the phone's push is retried ...
        user_id = await person(db)
        await subscribe(db, user_id, laptop)
        await subscribe(db, user_id, phone)
        async with (
            worker(db, notify_backoff_seconds=0.05) as sender,
            worker(db, notify_backoff_seconds=0.05) as closer,
        ):
            asked = await action(db)
            await passes(sender, lambda: len(laptop.received.now()) == 1 and len(phone.asked.now()) == 1)
            phone.script.hold.clear()  # ... and its retry is held by the push service
            sending = asyncio.create_task(passes(sender, lambda: len(phone.received.now()) == 1))
            await eventually(lambda: len(phone.asked.now()) == 2)
            await change(db, asked, status="answered")
            # Another worker closes what was shown: the laptop; the phone's push is still being sent.
            await passes(closer, lambda: ("close", asked.pending_id) in kinds(laptop))
            assert kinds(phone) == []
            phone.script.hold.set()  # it arrives after all
            await asyncio.wait_for(sending, 10)
            assert kinds(phone) == [("pending", asked.pending_id)]
            await passes(closer, lambda: ("close", asked.pending_id) in kinds(phone))
        assert kinds(laptop) == [("pending", asked.pending_id), ("close", asked.pending_id)]
        assert kinds(phone) == [("pending", asked.pending_id), ("close", asked.pending_id)]


async def test_a_claimed_delivery_closes_nothing_until_the_action_is_settled_for_good(db: Database) -> None:
    with push_service() as phone:
        user_id = await person(db)
        await subscribe(db, user_id, phone)
        async with worker(db) as reach:
            asked = await action(db)
            await passes(reach, lambda: len(phone.received.now()) == 1)
            await change(db, asked, **{INTENT_KEY: True})  # an answer's delivery is claimed
            for _ in range(5):
                await reach.run_once()
            await change(db, asked, **{INTENT_KEY: None})  # ... and the claim restored: still open
            for _ in range(5):
                await reach.run_once()
            await asyncio.sleep(0.3)
            assert kinds(phone) == [("pending", asked.pending_id)]
            await change(db, asked, status="answered")
            await passes(reach, lambda: len(phone.received.now()) == 2)
        assert kinds(phone) == [("pending", asked.pending_id), ("close", asked.pending_id)]


async def test_a_push_due_while_a_delivery_is_claimed_waits_and_goes_out_if_the_claim_is_restored(
    db: Database,
) -> None:
    with push_service() as phone:
        user_id = await person(db)
        await subscribe(db, user_id, phone)
        async with worker(db, notify_backoff_seconds=0.05) as reach:
            asked = await action(db)
            await change(db, asked, **{INTENT_KEY: True})
            for _ in range(3):
                await reach.run_once()
                await asyncio.sleep(0.06)
            (row,) = await outbox(db, asked.pending_id)
            assert (row.status, row.last_error) == ("queued", "the action is delivery_claimed")
            await change(db, asked, **{INTENT_KEY: None})
            await passes(reach, lambda: len(phone.received.now()) == 1)
        assert kinds(phone) == [("pending", asked.pending_id)]


# --- no open relay ---------------------------------------------------------------------------------


async def test_no_redirect_is_followed_for_a_push_or_a_channel(db: Database) -> None:
    with push_service() as elsewhere, webhook() as beyond, push_service() as phone, webhook() as chat:
        # Both answer 307 towards another receiver on this machine, which is allowed as a target: a
        # redirect followed would reach it.
        phone.script.first = [307]
        phone.script.location = elsewhere.endpoint
        chat.script.status = 307
        chat.script.location = f"http://{beyond.address}/hook"
        user_id = await person(db)
        await subscribe(db, user_id, phone)
        await add_channel(db, user_id, f"json://{chat.address}/hook")
        async with worker(db, notify_backoff_seconds=0.05, notify_retry_seconds=0.3) as reach:
            asked = await action(db, deadline=0.3)
            await passes(reach, lambda: phone.asked.now() != [] and chat.asked.now() != [])
            await asyncio.sleep(0.5)
            for _ in range(3):
                await reach.run_once()
        assert elsewhere.asked.now() == []
        assert beyond.asked.now() == []
        rows = {r.destination: r for r in await outbox(db, asked.pending_id)}
        assert rows["push"].status == "failed", rows["push"]
        assert rows["push"].last_error.startswith("307"), rows["push"]
        assert rows["channel"].status == "failed", rows["channel"]  # not accepted, retried to the deadline


async def test_the_target_is_checked_again_before_each_send(db: Database) -> None:
    with push_service() as phone, webhook() as chat:
        user_id = await person(db)
        # Stored while this machine was an allowed target (or a name that resolved elsewhere then).
        await subscribe(db, user_id, phone)
        await add_channel(db, user_id, f"json://{chat.address}/hook")
        async with worker(db, outbound_allowed_hosts=()) as reach:
            asked = await action(db)
            await reach.run_once()  # claims both rows, refuses both
        assert phone.asked.now() == []
        assert chat.asked.now() == []
        rows = await outbox(db, asked.pending_id)
        assert sorted(r.status for r in rows) == ["failed", "failed"]
        for row in rows:
            assert "TURNWISE_OUTBOUND_ALLOWED_HOSTS" in row.last_error, row.last_error


# --- pruning ---------------------------------------------------------------------------------------


async def test_finished_rows_older_than_the_keep_time_are_pruned(db: Database) -> None:
    now = utcnow()
    old, recent = now - dt.timedelta(days=8), now - dt.timedelta(days=6)

    def row(name: str, status: str, created: dt.datetime, **extra: Any) -> dict[str, Any]:
        return {
            "id": name,
            "pending_id": "p-" + name,
            "kind": "pending",
            "task_id": "t",
            "session_id": "s",
            "destination": "push",
            "destination_id": "d",
            "status": status,
            "due_at": created,
            "deadline_at": created,
            "attempts": 1,
            "close_queued": True,
            "created_at": created,
            **extra,
        }

    rows = [
        row("old-sent", "sent", old),
        row("old-skipped", "skipped", old),
        row("old-gone", "gone", old),
        row("old-failed", "failed", old),
        row("old-close-sent", "sent", old, kind="close"),
        row("old-queued", "queued", old),  # still to be sent
        row("old-shown-open", "sent", old, close_queued=False),  # its close is still to be queued
        row("recent-sent", "sent", recent),
        row("recent-failed", "failed", recent, destination="channel"),
    ]
    async with db.write() as conn:
        await conn.execute(O.insert(), rows)
    async with worker(db, notify_keep_days=7) as reach:
        await reach.run_once()
        await reach.run_once()  # pruned once an hour, not at every pass
    names = {r["id"] for r in rows}
    left = sorted(r.id for r in await outbox(db) if r.id in names)
    assert left == ["old-queued", "old-shown-open", "recent-failed", "recent-sent"]
