"""Reminders and escalation: a person's preferences, and the worker's claim that decides, for each
due message, whether it goes now, later or never, and which messages of the same action follow it.

Everything a claim decides is written in its one transaction, with the rows it holds (PostgreSQL:
`FOR UPDATE SKIP LOCKED`, so with `--workers N` one process decides each row):

- a first notice goes out `notify_after` after the ask (the person's, never sooner than the
  server's): written for the server's delay, it is put off until the person's own;
- when a person's message is claimed while the action waits, their next one is written: the next
  reminder to the same destination (`remind_every` later) and, with a first notice, their
  escalation (to their escalation channel, `escalate_after` after the ask). Each exists at most
  once per action, step and destination (the outbox's unique key), however often a send is retried
  or by whom;
- a reminder or escalation is claimed only while its action still waits, as read after taking its
  session's lock (the lock every settle takes, so a settle commits before this read or after this
  claim); for a settled action it is skipped, with every other reminder of it still queued. The
  send reads the action again just before it goes (`delivery`), as every message does;
- an escalation channel hears of nothing but escalations: its first notice is skipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.domain.errors import InvalidInput
from backend.domain.lifecycle import BundleState
from backend.domain.reminders import Preferences, validate
from backend.repository import bundles, locks
from backend.repository import reach as repo
from backend.repository import reminders as plans
from backend.repository.reach import OutboxRow
from backend.services.reach.base import Part
from backend.services.reach.closing import SETTLED, bundles_of

ESCALATION_ONLY = "an escalation channel: told only when the action escalates"
SETTLED_NOTE = "the action was settled"
FIELDS = ("notify_after", "remind_every", "escalate_after", "escalate_channel_id")


@dataclass
class Plan:
    """What one claim writes."""

    claim: list[str] = field(default_factory=list)
    put_off: dict[str, tuple[dt.datetime, dt.datetime]] = field(default_factory=dict)
    skip: dict[str, str] = field(default_factory=dict)
    follow_ups: list[plans.FollowUp] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)


def _is_escalation_channel(prefs: Preferences, destination: str, destination_id: str) -> bool:
    return prefs.escalates and destination == repo.CHANNEL and destination_id == prefs.escalate_channel_id


def _needs_state(d: plans.Due) -> bool:
    """Whether deciding this row reads its action: a reminder or escalation always; a first notice
    when its person may have follow-ups."""
    if d.person is None or d.row.kind == repo.CLOSE:
        return False
    if d.row.kind in plans.WHILE_WAITING:
        return True
    return d.prefs.remind_every is not None or d.prefs.escalates


class Planner:
    """The decisions of one claim, from its held rows and their actions' states (pure)."""

    def __init__(self, now: dt.datetime, server_delay: float, retry_seconds: float) -> None:
        self.now = now
        self.server_delay = server_delay
        self.retry = dt.timedelta(seconds=retry_seconds)
        self.plan = Plan()

    def _follow(self, d: plans.Due, kind: str, step: int, where: tuple[str, str], due: dt.datetime) -> None:
        asked = d.row.asked or self.now
        due = max(due, self.now)
        self.plan.follow_ups.append(plans.FollowUp(d.row, kind, step, *where, due, due + self.retry, asked))

    def _follow_ups(self, d: plans.Due) -> None:
        """The person's next messages of this action, once this one is claimed while it waits: the
        next reminder to the same destination; after a first notice, the escalation too (only
        then: finished rows are pruned after a while, and a reminder a week on must not find the
        escalation gone and write it again)."""
        prefs, row = d.prefs, d.row
        if prefs.remind_every is not None and not _is_escalation_channel(
            prefs, row.destination, row.destination_id
        ):
            every = dt.timedelta(seconds=prefs.remind_every)
            where = (row.destination, row.destination_id)
            self._follow(d, plans.REMIND, row.step + 1, where, self.now + every)
        if (
            row.kind == repo.PENDING
            and prefs.escalate_after is not None
            and prefs.escalate_channel_id is not None
        ):
            at = (row.asked or self.now) + dt.timedelta(seconds=prefs.escalate_after)
            self._follow(d, plans.ESCALATE, 0, (repo.CHANNEL, prefs.escalate_channel_id), at)

    def first_notice(self, d: plans.Due, waiting: bool) -> None:
        row, prefs = d.row, d.prefs
        escalation_only = _is_escalation_channel(prefs, row.destination, row.destination_id)
        asked = row.asked
        if asked is not None and row.attempts == 0 and not escalation_only:
            first = asked + dt.timedelta(seconds=prefs.first_notice(self.server_delay))
            if self.now < first:  # the person chose a later notice than the server's
                self.plan.put_off[row.id] = (first, first + self.retry)
                return
        if escalation_only:
            self.plan.skip[row.id] = ESCALATION_ONLY
        else:
            self.plan.claim.append(row.id)
        if waiting and d.sees:
            self._follow_ups(d)

    def while_waiting(self, d: plans.Due, waiting: bool) -> None:
        """A reminder or an escalation: only while the action waits and its person still wants it."""
        row, prefs = d.row, d.prefs
        if not waiting:
            self.plan.skip[row.id] = SETTLED_NOTE
            self.plan.settled.append(row.pending_id)
            return
        escalation_only = _is_escalation_channel(prefs, row.destination, row.destination_id)
        if not d.sees:
            self.plan.skip[row.id] = "its person no longer sees the task"
        elif row.kind == plans.ESCALATE and not escalation_only:
            self.plan.skip[row.id] = "escalation turned off or moved to another channel"
        elif row.kind == plans.REMIND and (prefs.remind_every is None or escalation_only):
            self.plan.skip[row.id] = "reminders turned off for this destination"
        else:
            self.plan.claim.append(row.id)
            if row.kind == plans.REMIND:
                self._follow_ups(d)

    def decide(self, held: Sequence[plans.Due], states: dict[str, BundleState | None]) -> Plan:
        for d in held:
            if not _needs_state(d):
                if d.row.kind == repo.PENDING and d.person is not None:
                    self.first_notice(d, waiting=False)
                else:
                    self.plan.claim.append(d.row.id)  # a close, or a destination gone (delivery says so)
                continue
            state = states.get(d.row.pending_id)
            waiting = state is not None and state not in SETTLED
            if d.row.kind == repo.PENDING:
                self.first_notice(d, waiting)
            else:
                self.while_waiting(d, waiting)
        return self.plan


class Reminders(Part):
    """Preferences, and the claim that writes the follow-ups of what it claims."""

    async def preferences(self, user_id: str) -> Preferences:
        async with self.deps.db.read() as conn:
            return await plans.preferences(conn, user_id)

    async def set_preferences(self, user_id: str, changes: dict[str, Any]) -> Preferences:
        """Change the named fields (`FIELDS`; None clears one, back to its default); the others stay.
        Checked whole before anything is written: an InvalidInput names the field."""
        unknown = set(changes) - set(FIELDS)
        if unknown:
            raise InvalidInput(sorted(unknown)[0], "is not a notification preference")
        async with self.deps.db.write() as conn:
            if user_id == repo.BOOTSTRAP_USER:
                await repo.ensure_bootstrap_user(conn)
            current = await plans.preferences(conn, user_id)
            merged = Preferences(**{name: changes.get(name, getattr(current, name)) for name in FIELDS})
            own = {c.id for c in await repo.channels_of(conn, user_id)}
            validate(merged, server_delay=float(self.settings.notify_after_seconds), own_channels=own)
            await plans.save_preferences(conn, user_id, merged)
        return merged

    async def _claim(
        self, conn: AsyncConnection, now: dt.datetime, lease: dt.timedelta, limit: int
    ) -> list[OutboxRow]:
        """In the worker's write transaction: hold the due rows, decide each (`Planner`), write it
        all, and return the rows claimed for sending."""
        held = await plans.due(conn, now, limit)
        if not held:
            return []
        states: dict[str, BundleState | None] = {}
        deciding = [d for d in held if _needs_state(d)]
        if deciding:
            # The lock every settle of these sessions takes: what is read next is after any settle
            # that committed, and a settle not yet committed waits for this claim.
            await locks.lock_sessions(conn, {d.row.session_id for d in deciding})
            pending_ids = list(dict.fromkeys(d.row.pending_id for d in deciding))
            found = bundles_of(await bundles.bundle_facts(conn, pending_ids))
            states = {p: (found[p].state if p in found else None) for p in pending_ids}
        plan = Planner(
            now, float(self.settings.notify_after_seconds), float(self.settings.notify_retry_seconds)
        ).decide(held, states)
        await plans.put_off(conn, plan.put_off)
        await plans.skip(conn, plan.skip)
        await plans.drop_while_waiting(conn, sorted(set(plan.settled)), SETTLED_NOTE)
        await plans.add(conn, plan.follow_ups, now)
        return await plans.claim(conn, plan.claim, self.deps.instance_id, now + lease)
