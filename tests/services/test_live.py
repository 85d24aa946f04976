"""The live hub: slow subscribers get the newest state per key, and snapshots never step one back."""

from __future__ import annotations

import asyncio
from typing import Any

from backend.db.engine import Database
from backend.domain.records import Revision, SessionPending
from backend.services.live import projection_order
from backend.services.mailbox import Mailbox
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


# --- direct sends (`Mailbox.direct`) --------------------------------------------------------------


class Sender:
    """A direct sender that records what it sent; `gate` set: each send waits for it (a socket that
    does not take the message at once); `declines`: values it hands back to the reader."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.gate: asyncio.Event | None = None
        self.declines: set[int] = set()
        self.fails: set[int] = set()

    def __call__(self, value: SessionPending) -> Any:
        seq = value.revision.sequence
        if seq in self.declines:
            return None
        return self._send(seq)

    async def _send(self, seq: int) -> bool:
        if self.gate is not None:
            await self.gate.wait()
        if seq in self.fails:
            raise ConnectionError("gone")
        self.sent.append(seq)
        return True


async def idle_reader(box: Mailbox[SessionPending], got: list[int]) -> asyncio.Task[None]:
    async def read() -> None:
        async for value in box:
            got.append(value.revision.sequence)

    task = asyncio.ensure_future(read())
    await asyncio.sleep(0)  # now waiting
    return task


async def test_a_value_offered_to_an_idle_reader_is_sent_directly_at_once_without_waking_it() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    box.direct = sender = Sender()
    got: list[int] = []
    reader = await idle_reader(box, got)
    box.offer("s1", projection("s1", 1))
    assert sender.sent == [1]  # within the offer itself: no task made, nothing scheduled
    box.offer("s1", projection("s1", 1))  # the same state again is dropped, as for the reader
    box.offer("s1", projection("s1", 0))
    box.offer("s2", projection("s2", 1))
    await asyncio.sleep(0.01)
    assert (sender.sent, got) == ([1, 1], [])
    assert len(box) == 0
    reader.cancel()


async def test_values_offered_while_a_direct_send_waits_follow_it_in_order_and_stale_ones_drop() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    box.direct = sender = Sender()
    sender.gate = asyncio.Event()
    got: list[int] = []
    reader = await idle_reader(box, got)
    box.offer("s1", projection("s1", 5))  # waits in the socket
    box.offer("s1", projection("s1", 4))  # older than the one being sent: dropped once it is sent
    box.offer("s2", projection("s2", 9))  # the reader gets it, after the send
    await asyncio.sleep(0.01)
    assert (sender.sent, got) == ([], [])
    sender.gate.set()
    await asyncio.sleep(0.01)
    assert sender.sent == [5]
    assert got == [9]
    # A newer value for the key offered during a send is delivered after it.
    sender.gate = asyncio.Event()
    box.offer("s1", projection("s1", 6))
    box.offer("s1", projection("s1", 7))
    sender.gate.set()
    await asyncio.sleep(0.01)
    assert (sender.sent, got) == ([5, 6], [9, 7])
    reader.cancel()


async def test_a_value_declined_or_not_sent_goes_to_the_reader() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    box.direct = sender = Sender()
    sender.declines, sender.fails = {1}, {2}
    got: list[int] = []
    reader = await idle_reader(box, got)
    box.offer("s1", projection("s1", 1))
    await asyncio.sleep(0.01)
    box.offer("s1", projection("s1", 2))  # fails at once
    await asyncio.sleep(0.01)
    sender.gate = asyncio.Event()
    sender.fails = {3}
    box.offer("s1", projection("s1", 3))  # fails after waiting
    sender.gate.set()
    await asyncio.sleep(0.01)
    assert (sender.sent, got) == ([], [1, 2, 3])
    # Not sent, but a newer value came meanwhile: only the newer one reaches the reader.
    sender.gate, sender.fails = asyncio.Event(), {4}
    box.offer("s1", projection("s1", 4))
    box.offer("s1", projection("s1", 5))
    sender.gate.set()
    await asyncio.sleep(0.01)
    assert got == [1, 2, 3, 5]
    reader.cancel()


async def test_a_reader_that_holds_values_or_is_busy_gets_them_itself() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    box.direct = sender = Sender()
    box.offer("s1", projection("s1", 1))  # nobody waiting: held for the reader
    assert sender.sent == []
    assert (await box.get()).revision.sequence == 1
    # The reader is busy with that value (not waiting): the next one waits for it, in order.
    box.offer("s1", projection("s1", 2))
    assert sender.sent == []
    assert (await box.get()).revision.sequence == 2


async def test_a_send_still_waiting_when_the_mailbox_closes_ends_the_reader_once_it_is_done() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)
    box.direct = sender = Sender()
    sender.gate = asyncio.Event()
    got: list[int] = []
    reader = await idle_reader(box, got)
    box.offer("s1", projection("s1", 1))
    box.close()
    sender.gate.set()
    await asyncio.wait_for(reader, 5)
    assert (sender.sent, got) == ([1], [])


async def test_eagerly_runs_to_the_first_wait_and_a_task_goes_on_from_there() -> None:
    from backend.services.mailbox import eagerly

    steps: list[str] = []
    gate = asyncio.Event()

    async def work() -> int:
        steps.append("start")
        await asyncio.sleep(0)
        steps.append("after a yield")
        await gate.wait()
        steps.append("after the gate")
        return 7

    async def quick() -> int:
        return 5

    async def fails() -> int:
        raise ValueError("no")

    assert eagerly(quick()).result() == 5
    assert isinstance(eagerly(fails()).exception(), ValueError)
    running = eagerly(work())
    assert steps == ["start"]
    assert not running.done()
    await asyncio.sleep(0.01)
    assert steps == ["start", "after a yield"]
    gate.set()
    assert await running == 7
    # A cancellation reaches the coroutine where it waits.
    gate.clear()
    cancelled: list[bool] = []

    async def waits() -> None:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    running = eagerly(waits())
    running.cancel()
    await asyncio.sleep(0.01)
    assert running.cancelled()
    assert cancelled == [True]


async def test_a_sender_that_raises_leaves_the_value_and_every_later_one_to_the_reader() -> None:
    box: Mailbox[SessionPending] = Mailbox(projection_order)

    def broken(_value: SessionPending) -> Any:
        raise RuntimeError("a defect")

    box.direct = broken
    got: list[int] = []
    reader = await idle_reader(box, got)
    box.offer("s1", projection("s1", 1))
    await asyncio.sleep(0.01)
    box.offer("s1", projection("s1", 2))
    await asyncio.sleep(0.01)
    assert got == [1, 2]
    assert box.direct is None
    reader.cancel()
