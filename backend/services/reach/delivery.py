"""Sending a claimed batch: a push through its push service, a message through Apprise, each once."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from backend.db.engine import utcnow
from backend.domain import reach as text
from backend.domain import reminders as later
from backend.domain.errors import InvalidInput
from backend.domain.lifecycle import Bundle, BundleState
from backend.outbound import channels, webpush
from backend.repository import bundles, reminders, tasks
from backend.repository import reach as repo
from backend.repository.reach import OutboxRow
from backend.repository.reminders import ESCALATE, REMIND
from backend.services.reach.closing import SETTLED, bundles_of
from backend.services.reach.destinations import Destinations

log = logging.getLogger("turnwise.reach")
ACTIVE = (BundleState.ACTIVE_LIVE, BundleState.ACTIVE_DETACHED)
# One send may take notify_send_seconds (each phase of an HTTP request, Apprise's whole send) and
# this much more in all (at most notify_send_seconds more); a claimed row's lease covers two such
# sends, so a live process's batch is not taken for a dead one's.
SEND_SLACK = 1.0
MAX_BACKOFF = 60.0
DEFAULT_TITLE = "A task"


def _waited(row: OutboxRow) -> str:
    """How long the row's action has waited, as its message says it."""
    asked = row.asked
    return later.waited(0.0 if asked is None else (utcnow() - asked).total_seconds())


def _backoff(attempts: int, first: float) -> dt.timedelta:
    return dt.timedelta(seconds=min(first * 2.0 ** max(attempts - 1, 0), MAX_BACKOFF))


@dataclass(frozen=True)
class Outcome:
    """How one claimed row's send ended (recorded with the rest of its batch)."""

    status: str
    error: str | None = None
    retry_at: dt.datetime | None = None
    drop_subscription: str | None = None


@dataclass(frozen=True)
class Batch:
    """What a claimed batch's messages need, read at once."""

    bundles: dict[str, Bundle]
    subscriptions: dict[str, repo.PushSubscription]
    channels: dict[str, repo.Channel]
    titles: dict[str, str]
    names: dict[str, str]  # the people whose escalation channels are told


class Delivery(Destinations):
    """One send per claimed row, bounded in time; its outcome decides a retry, never a resend."""

    client: httpx.AsyncClient | None
    sent: int

    def _new_client(self) -> httpx.AsyncClient:
        # A push service never redirects; following one could lead a request to this machine.
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.settings.notify_send_seconds), follow_redirects=False
        )

    @property
    def lease(self) -> dt.timedelta:
        """How long a claimed row is this process's: past it, the row counts as left by a dead one."""
        return dt.timedelta(seconds=2 * self._send_bound)

    @property
    def _send_bound(self) -> float:
        """The longest one send may take in all."""
        seconds = float(self.settings.notify_send_seconds)
        return seconds + min(SEND_SLACK, seconds)

    async def _send_all(self, claimed: Sequence[OutboxRow]) -> None:
        """Send a claimed batch: one read for everything the messages need, the sends side by side,
        one write for every outcome."""
        batch = await self._batch(claimed)
        outcomes = await asyncio.gather(*(self._send(r, batch) for r in claimed))
        async with self.deps.db.write() as conn:
            for row, outcome in zip(claimed, outcomes, strict=True):
                if outcome.drop_subscription is not None:
                    await repo.drop_push_subscription(conn, outcome.drop_subscription)
                await repo.finish(
                    conn, row.id, outcome.status, error=outcome.error, retry_at=outcome.retry_at
                )
        self.sent += sum(1 for o in outcomes if o.status == repo.SENT)

    async def _batch(self, rows: Sequence[OutboxRow]) -> Batch:
        pending_ids = [r.pending_id for r in rows]
        push_ids = [r.destination_id for r in rows if r.destination == repo.PUSH]
        channel_ids = [r.destination_id for r in rows if r.destination == repo.CHANNEL]
        async with self.deps.db.read() as conn:
            facts = await bundles.bundle_facts(conn, list(dict.fromkeys(pending_ids)))
            subscriptions = await repo.push_subscriptions(conn, push_ids)
            found_channels = await repo.channels(conn, channel_ids)
            titles = await tasks.task_titles(conn, sorted({r.task_id for r in rows}))
            escalated = {r.destination_id for r in rows if r.kind == ESCALATE}
            people = sorted({c.user_id for c in found_channels.values() if c.id in escalated})
            names = await reminders.names(conn, people)
        return Batch(bundles_of(facts), subscriptions, found_channels, titles, names)

    def _retry(self, row: OutboxRow, error: str, *, give_up: str = repo.FAILED) -> Outcome:
        retry_at = utcnow() + _backoff(row.attempts, self.settings.notify_backoff_seconds)
        if retry_at > row.deadline_at:
            return Outcome(give_up, f"gave up: {error}")
        return Outcome(repo.QUEUED, error, retry_at=retry_at)

    async def _send(self, row: OutboxRow, batch: Batch) -> Outcome:
        try:
            return await asyncio.wait_for(self._attempt(row, batch), self._send_bound)
        except InvalidInput as exc:  # refused (no open relay), or a channel URL no longer taken
            return Outcome(repo.FAILED, str(exc))
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return self._retry(row, f"{type(exc).__name__}: {exc}")
        except (httpx.TimeoutException, TimeoutError) as exc:
            # It may have arrived: never sent twice.
            return Outcome(repo.FAILED, f"no answer in time ({type(exc).__name__})")
        except Exception as exc:
            log.warning(
                "notification failed", extra={"event": "reach.send_failed", "row": row.id}, exc_info=True
            )
            return Outcome(repo.FAILED, f"{type(exc).__name__}: {exc}"[:500])

    async def _attempt(self, row: OutboxRow, batch: Batch) -> Outcome:
        bundle = batch.bundles.get(row.pending_id)
        if row.kind != repo.CLOSE and (bundle is None or bundle.state not in ACTIVE):
            if bundle is not None and bundle.state not in SETTLED:
                # An answer's delivery is claimed: if the claim is restored, the action is pending
                # again and its person must still hear of it. Look again later.
                return self._retry(row, f"the action is {bundle.state.value}", give_up=repo.SKIPPED)
            return Outcome(repo.SKIPPED)
        if row.destination == repo.PUSH:
            return await self._push(row, bundle, batch)
        return await self._message(row, bundle, batch)

    async def _push(self, row: OutboxRow, bundle: Bundle | None, batch: Batch) -> Outcome:
        found = batch.subscriptions.get(row.destination_id)
        if found is None:
            return Outcome(repo.GONE)
        await self._guard("endpoint", found.endpoint)
        if row.kind == repo.CLOSE or bundle is None:
            payload = text.close_payload(row.pending_id)
        else:
            payload = text.push_payload(bundle, batch.titles.get(row.task_id, DEFAULT_TITLE))
            if row.kind == REMIND:
                payload["title"], payload["body"] = later.reminder_push(
                    payload["title"], payload["body"], _waited(row)
                )
        client = self.client or self._new_client()
        result = await webpush.send(
            client,
            await self.load_keys(),
            self.settings.vapid_subject,
            found.endpoint,
            found.p256dh,
            found.auth,
            text.encode(payload),
            urgency="normal" if row.kind == repo.CLOSE else "high",
        )
        if result.delivered:
            log.info(
                "push sent",
                extra={"event": "reach.push_sent", "pending_id": row.pending_id, "kind": row.kind},
            )
            return Outcome(repo.SENT)
        if result.gone:
            log.info("push subscription gone", extra={"event": "reach.push_gone", "status": result.detail})
            return Outcome(repo.GONE, result.detail, drop_subscription=found.id)
        if result.retryable:
            return self._retry(row, result.detail)
        return Outcome(repo.FAILED, result.detail)

    async def _message(self, row: OutboxRow, bundle: Bundle | None, batch: Batch) -> Outcome:
        found = batch.channels.get(row.destination_id)
        if found is None or bundle is None:
            return Outcome(repo.GONE)
        # Parsed, checked and sent as one: the host checked is the one the plugin talks to.
        target = await self._channel_target(found.url)
        public = self.settings.public_url or f"http://{self.settings.host}:{self.settings.port}"
        title, body = text.chat_message(
            bundle, batch.titles.get(row.task_id, DEFAULT_TITLE), row.session_id, public
        )
        if row.kind == REMIND:
            title, body = later.reminder_chat(title, body, _waited(row))
        elif row.kind == ESCALATE:
            person = batch.names.get(found.user_id, "its person")
            title, body = later.escalation_chat(title, body, _waited(row), person)
        if await channels.deliver(target, title, body, self.settings.notify_send_seconds):
            log.info(
                "channel message sent",
                extra={"event": "reach.channel_sent", "pending_id": row.pending_id, "target": target.masked},
            )
            return Outcome(repo.SENT)
        return self._retry(row, f"{target.scheme} did not accept the message")
