"""The live hub: slow subscribers get the newest state per key, and snapshots never step one back."""

from __future__ import annotations

import asyncio
from typing import Any

from backend.db.engine import Database
from backend.domain.records import Revision, SessionPending
from backend.services.live import Mailbox, projection_order
from tests.services.support import services_for


def projection(session_id: str, seq: int, action: str | None = None) -> SessionPending:
    return SessionPending(session_id, "t", "RUNNING", None, action, Revision(1, seq))


async def test_a_slow_subscriber_gets_the_newest_state_per_session_not_a_backlog() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    for seq in range(1, 1001):
        box.offer("s1", projection("s1", seq))
        box.offer("s2", projection("s2", seq))
    assert len(box) == 2
    assert [(await box.get()).revision.sequence for _ in range(2)] == [1000, 1000]


async def test_an_older_snapshot_never_replaces_a_newer_change_waiting_or_delivered() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    box.offer("s1", projection("s1", 5, "permission"))
    box.offer("s1", projection("s1", 4))  # a snapshot read before the change
    assert (await box.get()).revision.sequence == 5
    box.offer("s1", projection("s1", 5, "permission"))  # the same state again
    box.offer("s1", projection("s1", 3))
    assert len(box) == 0
    box.offer("s1", projection("s1", 6))
    assert (await box.get()).revision.sequence == 6


async def test_hub_re_reads_once_and_fans_out_to_every_matching_watcher(db: Database) -> None:
    async with services_for(db) as services:
        hub = services.live
        await hub.start()
        try:
            task = await services.operations.create_task("t")
            session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
            with (
                hub.watch_projections(lambda t, _s: t == task.id) as by_task,
                hub.watch_projections(lambda _t, s: s == session.id) as by_session,
                hub.watch_projections(lambda _t, _s: False) as elsewhere,
            ):
                before = db.statements
                await services.operations.start_turn(session.id)
                got = await asyncio.wait_for(by_task.get(), 5)
                assert got.session_id == session.id
                assert (await asyncio.wait_for(by_session.get(), 5)) == got
                assert len(elsewhere) == 0
                assert db.statements - before < 30  # one batched re-read, not one per watcher
        finally:
            await hub.stop()


async def test_a_watcher_of_one_task_is_offered_that_tasks_changes_only(db: Database) -> None:
    async with services_for(db) as services:
        hub = services.live
        await hub.start()
        try:
            task = await services.operations.create_task("t")
            other = await services.operations.create_task("other")
            session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
            asked: list[tuple[str, str]] = []

            def counting(wanted: str | None) -> Any:
                def scope(t: str, s: str) -> bool:
                    asked.append((t, s))
                    return wanted is None or t == wanted

                return scope

            with (
                hub.watch_projections(counting(task.id), task_id=task.id) as mine,
                hub.watch_projections(counting(other.id), task_id=other.id) as theirs,
                hub.watch_projections(counting(None)) as everything,
            ):
                await services.operations.start_turn(session.id)
                got = await asyncio.wait_for(mine.get(), 5)
                assert got.session_id == session.id
                assert (await asyncio.wait_for(everything.get(), 5)) is got  # one record, offered to both
                assert len(theirs) == 0
                assert all(t == task.id for t, _ in asked)  # the other task's watcher was never asked
            assert hub.watcher_count == 0
            assert not hub._projections_by_task  # emptied groups are dropped with their last watcher
        finally:
            await hub.stop()


async def test_a_rank_given_with_an_offer_counts_as_the_values_own() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    newer = projection("s1", 7)
    box.offer("s1", newer, projection_order(newer))
    older = projection("s1", 6)
    box.offer("s1", older, projection_order(older))
    assert (await box.get()) is newer
    box.offer("s1", older, projection_order(older))
    assert len(box) == 0


async def test_a_closed_mailbox_wakes_its_reader_and_ends_once_drained() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    reader = asyncio.ensure_future(box.get())
    await asyncio.sleep(0)
    box.offer("s1", projection("s1", 1))
    assert (await asyncio.wait_for(reader, 5)).revision.sequence == 1
    reader = asyncio.ensure_future(box.get())
    await asyncio.sleep(0)
    box.close()
    try:
        await asyncio.wait_for(reader, 5)
    except StopAsyncIteration:
        pass
    else:
        raise AssertionError("a closed, drained mailbox ends")
