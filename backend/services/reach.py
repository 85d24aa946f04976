"""Reach: a person hears of a pending action with no tab open (Web Push, chat and mail channels).

Whom to tell is decided from the committed ask: `asked` writes one outbox row per destination of
every user who can see the task, in the ask's own unit of work (one statement; on PostgreSQL a
one-question ask's own statement writes them, `repository.clarifications.ask_context_inserting`),
so an ask never waits for a notification and a notification never exists for an ask that rolled
back. An ask that wrote rows (somebody has a destination) then wakes the workers for their due time:
this process's at once, every other process's through the bus (`WAKE_CHANNEL`); an ask that wrote
none tells nobody and publishes nothing. The worker (one loop per process) looks at the outbox when
woken, at the due time it learnt, at the next due row or claim it saw, every `notify_poll_seconds`
while delivered pushes await their close, after a bus gap, and otherwise every
`notify_idle_seconds` (a wake-up lost some other way); idle, it asks nothing of the database in
between. So a push goes out within `notify_after_seconds` plus the bus's delay on any process. Each
look:

1. records rows a dead process left `sending` as failed (they may have gone out: never twice);
2. claims due rows (`notify_after_seconds` after the ask; PostgreSQL: SKIP LOCKED, so with
   `--workers N` exactly one process takes each row), marking them `sending`;
3. sends each whose action is still pending (else `skipped`; while an answer's delivery is claimed
   it waits, since a claim may be restored): a push through the subscription's push service, a
   message through Apprise; 404/410 removes the subscription; a refused connection, 429 or 5xx is
   retried with backoff (`notify_backoff_seconds`, doubling to a minute) until the row's deadline
   (`notify_retry_seconds`); a send whose outcome is unknown (a timeout once sending) is not retried;
4. queues a `close` push for every device shown an action that stopped being pending for good
   (answered anywhere, skipped, superseded, expired, cancelled; a claimed delivery is not yet:
   it may be restored), walking every such action a page at a time;
5. about once an hour, deletes finished rows older than `notify_keep_days`.

A dead push service or webhook costs the worker a bounded wait (`notify_send_seconds` per send),
never an ask.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpx

from backend.background import stop_tasks
from backend.bus import BUS_GAP
from backend.db.engine import utcnow
from backend.db.health import is_outage
from backend.domain import reach as text
from backend.domain.errors import InvalidInput
from backend.domain.lifecycle import Bundle, BundleState, bundle_turn
from backend.outbound import channels, webpush
from backend.outbound.guard import check_target, listed
from backend.repository import clarifications as bundles
from backend.repository import meta, tasks
from backend.repository import reach as repo
from backend.repository.reach import OutboxRow
from backend.services.context import Deps
from backend.services.uow import Work

log = logging.getLogger("turnwise.reach")
VAPID_KEY = "vapid_private_key"
BATCH = 50
CLOSE_SCAN = 200  # pending ids per page of the walk that finds settled actions to close
ACTIVE = (BundleState.ACTIVE_LIVE, BundleState.ACTIVE_DETACHED)
# States an action never leaves: only these close its notifications (or skip its pushes). A claimed
# delivery is not one of them: the claim may be restored, and the action is pending again.
SETTLED = (BundleState.TERMINAL, BundleState.SUPERSEDED_HISTORY)
MAX_LABEL = 200
# One send may take notify_send_seconds (each phase of an HTTP request, Apprise's whole send) and
# this much more in all (at most notify_send_seconds more); a claimed row's lease covers two such
# sends, so a live process's batch is not taken for a dead one's.
SEND_SLACK = 1.0
MAX_BACKOFF = 60.0
PRUNE_EVERY = dt.timedelta(hours=1)
# Every worker hears here that an ask wrote outbox rows, and when they are due (published only then:
# an ask that tells nobody publishes nothing).
WAKE_CHANNEL = "turnwise.reach"
WAKE = "reach.due"
DEFAULT_TITLE = "A task"


@dataclass(frozen=True)
class ChannelView:
    id: str
    label: str
    target: str  # the URL with its secrets masked
    created_at: dt.datetime


def _due(event: dict[str, Any]) -> dt.datetime | None:
    """The due time a wake-up message names (None: not a wake-up, e.g. the bus's gap marker)."""
    if event.get("type") != WAKE:
        return None
    try:
        due = dt.datetime.fromisoformat(str(event.get("due")))
    except ValueError:
        return None
    return due if due.tzinfo is not None else None


def _backoff(attempts: int, first: float) -> dt.timedelta:
    return dt.timedelta(seconds=min(first * 2.0 ** max(attempts - 1, 0), MAX_BACKOFF))


def _port(parts: SplitResult) -> int:
    """The port an http(s) URL connects to."""
    return parts.port or (443 if parts.scheme == "https" else 80)


@dataclass
class Reach:
    deps: Deps
    keys: webpush.VapidKeys | None = None
    client: httpx.AsyncClient | None = None
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0  # messages this process delivered (tests and the bench read it)
    close_scan: int = CLOSE_SCAN
    _soonest: dt.datetime | None = None  # the earliest due time an ask (of any process) woke it for
    _close_after: str | None = None  # where the walk over shown actions goes on (None: the start)
    _prune_at: dt.datetime | None = None  # when finished rows are next deleted (None: now)
    _look: bool = False  # look at the outbox at once, whatever the wait

    @property
    def settings(self) -> Any:
        return self.deps.settings

    # --- lifetime -------------------------------------------------------------------------------

    async def start(self, *, worker: bool = True) -> None:
        await self.load_keys()
        self.client = self._new_client()
        if worker:
            self._task = asyncio.create_task(self._run(), name="turnwise-reach")

    async def stop(self) -> None:
        await stop_tasks([self._task], log, "reach worker")
        self._task = None
        if self.client is not None:
            await self.client.aclose()
            self.client = None

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

    async def load_keys(self) -> webpush.VapidKeys:
        """The VAPID key pair: TURNWISE_VAPID_PRIVATE_KEY, or the one kept in the database (made on
        the first start; processes starting together agree on one)."""
        if self.keys is None:
            configured = self.settings.vapid_private_key
            if configured:
                self.keys = webpush.VapidKeys.load(configured)
            else:
                candidate = webpush.VapidKeys.generate().private_text()
                async with self.deps.db.write() as conn:
                    stored = await meta.value_or_set(conn, VAPID_KEY, candidate)
                self.keys = webpush.VapidKeys.load(stored)
        return self.keys

    # --- the ask's part -------------------------------------------------------------------------

    def ask_outbox(self) -> repo.AskOutbox:
        """When a new pending action's outbox rows are due and given up."""
        now = utcnow()
        due = now + dt.timedelta(seconds=self.settings.notify_after_seconds)
        return repo.AskOutbox(due, due + dt.timedelta(seconds=self.settings.notify_retry_seconds), now)

    async def asked(
        self,
        work: Work,
        pending_id: str,
        task_id: str,
        session_id: str,
        outbox: repo.AskOutbox,
        written: int | None,
    ) -> None:
        """In the ask's unit of work: the outbox rows of a new pending action (one statement, unless
        the ask's own statement wrote them: `written`, how many). Only when somebody has a
        destination (rows were written) is any worker told, once the ask committed: this process's
        at once, every other process's through the bus (`WAKE_CHANNEL`, with the due time)."""
        if written is None:
            written = await repo.enqueue_ask(
                work.conn, pending_id=pending_id, task_id=task_id, session_id=session_id, outbox=outbox
            )
        if written:
            work.after_commit(lambda: self.wake_at(outbox.due_at))
            work.post(WAKE_CHANNEL, {"type": WAKE, "due": outbox.due_at.isoformat()})

    def wake_at(self, due: dt.datetime) -> None:
        """Rows are due at `due` (committed): the worker looks by then."""
        if self._soonest is None or due < self._soonest:
            self._soonest = due
            self._wake.set()

    def look_now(self) -> None:
        """The worker looks at the outbox at once (a bus gap may have hidden a wake-up; closes queued)."""
        self._look = True
        self._wake.set()

    # --- destinations ---------------------------------------------------------------------------

    async def _guard(self, field_name: str, url: str) -> None:
        parts = urlsplit(url)
        await check_target(field_name, parts.hostname, _port(parts), self.settings.outbound_allowed_hosts)

    async def register_push(self, user_id: str, endpoint: str, p256dh: str, auth: str) -> None:
        parts = urlsplit(endpoint)
        try:
            port = _port(parts)
        except ValueError:
            raise InvalidInput("endpoint", "has an invalid port") from None
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise InvalidInput("endpoint", "must be the push service URL of the subscription")
        if parts.scheme == "http" and not listed(parts.hostname, port, self.settings.outbound_allowed_hosts):
            raise InvalidInput("endpoint", "must be an https URL")
        for name, value, size in (("p256dh", p256dh, 65), ("auth", auth, 16)):
            try:
                raw = webpush.b64url_decode(value)
            except ValueError:
                raise InvalidInput(name, "must be URL-safe base64") from None
            if len(raw) != size:
                raise InvalidInput(name, f"must hold {size} bytes")
        await self._guard("endpoint", endpoint)
        async with self.deps.db.write() as conn:
            if user_id == repo.BOOTSTRAP_USER:
                await repo.ensure_bootstrap_user(conn)
            await repo.save_push_subscription(conn, user_id, endpoint, p256dh, auth)
        log.info("push subscription registered", extra={"event": "reach.push_registered", "user_id": user_id})

    async def unregister_push(self, user_id: str, endpoint: str) -> bool:
        async with self.deps.db.write() as conn:
            return await repo.delete_push_subscription(conn, user_id, endpoint)

    async def _channel_target(self, url: str) -> channels.ChannelTarget:
        """What a channel URL sends through, its host checked (no open relay); InvalidInput if not."""
        target = await asyncio.to_thread(channels.inspect, url)
        if target.host is not None:
            await check_target("url", target.host, target.port, self.settings.outbound_allowed_hosts)
        return target

    async def add_channel(self, user_id: str, url: str, label: str | None) -> ChannelView:
        target = await self._channel_target(url)
        name = (label or "").strip() or target.scheme
        if len(name) > MAX_LABEL:
            raise InvalidInput("label", f"must be at most {MAX_LABEL} characters")
        async with self.deps.db.write() as conn:
            if user_id == repo.BOOTSTRAP_USER:
                await repo.ensure_bootstrap_user(conn)
            channel = await repo.add_channel(conn, user_id, url.strip(), name)
        log.info(
            "notification channel added",
            extra={"event": "reach.channel_added", "user_id": user_id, "target": target.masked},
        )
        return ChannelView(channel.id, channel.label, target.masked, channel.created_at)

    async def channels(self, user_id: str) -> list[ChannelView]:
        async with self.deps.db.read() as conn:
            found = await repo.channels_of(conn, user_id)
        out = []
        for c in found:
            try:
                masked = (await asyncio.to_thread(channels.inspect, c.url)).masked
            except InvalidInput:
                masked = f"{urlsplit(c.url).scheme}://…"
            out.append(ChannelView(c.id, c.label, masked, c.created_at))
        return out

    async def remove_channel(self, user_id: str, channel_id: str) -> bool:
        async with self.deps.db.write() as conn:
            return await repo.remove_channel(conn, user_id, channel_id)

    # --- the worker -----------------------------------------------------------------------------

    def _on_wake(self, event: dict[str, Any]) -> None:
        due = _due(event)
        if due is None:
            self.look_now()  # a bus gap (or a message this release cannot read)
        else:
            self.wake_at(due)

    async def _run(self) -> None:
        # Wake-ups from every process's asks (and this one's); what was published before the
        # subscription is found by the first pass below.
        listener = await self.deps.bus.follow(WAKE_CHANNEL, self._on_wake, after_gap={"type": BUS_GAP})
        try:
            loop = asyncio.get_running_loop()
            while True:
                self._look = False
                try:
                    delay = await self.run_once()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    delay = float(self.settings.notify_poll_seconds)
                    if self._soonest is not None and self._soonest <= utcnow():
                        self._soonest = None  # committed rows: the next pass's outlook finds them
                    if is_outage(exc):
                        log.warning("notification worker: database unavailable; retrying")
                    else:
                        log.exception(
                            "notification worker step failed", extra={"event": "reach.worker_failed"}
                        )
                until = loop.time() + delay
                while not self._look:
                    left = until - loop.time()
                    soonest = self._soonest
                    if soonest is not None:
                        left = min(left, (soonest - utcnow()).total_seconds())
                    if left <= 0:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), left)
                    self._wake.clear()
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    async def run_once(self) -> float:
        """One pass of the worker; the seconds until it should look again. Idle (nothing queued,
        nothing being sent, no delivered push awaiting its close) it looks again only after
        `notify_idle_seconds`, or when an ask wakes it (`wake_at`: this process's asks, and every
        other's through the bus); while delivered pushes await their close, every
        `notify_poll_seconds`."""
        now = utcnow()
        if self._soonest is not None and self._soonest <= now:
            # Rows committed before they woke the worker: this pass's outlook finds them. A wake-up
            # that arrives from here on counts for the next pass.
            self._soonest = None
        if self._prune_at is None or now >= self._prune_at:
            await self.prune(now)
        async with self.deps.db.read() as conn:
            seen = await repo.outlook(conn)
        if seen.stale_sends(now):
            async with self.deps.db.write() as conn:
                await repo.abandon_stale_sends(conn, now)
        if seen.next_due is not None and seen.next_due <= now:
            async with self.deps.db.write() as conn:
                claimed = await repo.claim_due(conn, self.deps.instance_id, now, self.lease, BATCH)
            if claimed:
                await self._send_all(claimed)
                return 0.0  # more may be due: look again at once
        if seen.awaiting_close and await self._queue_closes():
            return 0.0  # the walk over shown actions goes on with its next page
        delay = float(
            self.settings.notify_poll_seconds if seen.awaiting_close else self.settings.notify_idle_seconds
        )
        later = utcnow()
        for at in (self._soonest, seen.next_due, seen.next_lease_end):
            if at is not None:
                delay = min(delay, max((at - later).total_seconds(), 0.0))
        return max(delay, 0.01)

    async def prune(self, now: dt.datetime) -> int:
        """Delete finished outbox rows older than `notify_keep_days`; done about once an hour."""
        self._prune_at = now + PRUNE_EVERY
        async with self.deps.db.write() as conn:
            pruned = await repo.prune(conn, now - dt.timedelta(days=self.settings.notify_keep_days))
        if pruned:
            log.info("notification outbox pruned", extra={"event": "reach.pruned", "rows": pruned})
        return pruned

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

    async def _states(self, pending_ids: Sequence[str]) -> dict[str, Bundle]:
        async with self.deps.db.read() as conn:
            facts = await bundles.bundle_facts(conn, list(dict.fromkeys(pending_ids)))
        return _bundles(facts)

    async def _queue_closes(self) -> bool:
        """One page of the walk over actions shown on some device and not closed yet: a `close` for
        those settled for good. Whether the walk goes on (a full page: there may be more)."""
        async with self.deps.db.read() as conn:
            shown = await repo.sent_push_actions(conn, self._close_after, self.close_scan)
        self._close_after = shown[-1] if len(shown) >= self.close_scan else None
        if not shown:
            return False
        states = await self._states(shown)
        settled = [p for p in shown if p not in states or states[p].state in SETTLED]
        if settled:
            now = utcnow()
            async with self.deps.db.write() as conn:
                queued = await repo.queue_closes(
                    conn, settled, now, now + dt.timedelta(seconds=self.settings.notify_retry_seconds)
                )
            if queued:
                self.look_now()
        return self._close_after is not None

    async def _batch(self, rows: Sequence[OutboxRow]) -> Batch:
        pending_ids = [r.pending_id for r in rows]
        push_ids = [r.destination_id for r in rows if r.destination == repo.PUSH]
        channel_ids = [r.destination_id for r in rows if r.destination == repo.CHANNEL]
        async with self.deps.db.read() as conn:
            facts = await bundles.bundle_facts(conn, list(dict.fromkeys(pending_ids)))
            subscriptions = await repo.push_subscriptions(conn, push_ids)
            found_channels = await repo.channels(conn, channel_ids)
            titles = await tasks.task_titles(conn, sorted({r.task_id for r in rows}))
        return Batch(_bundles(facts), subscriptions, found_channels, titles)

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
        if row.kind == repo.PENDING and (bundle is None or bundle.state not in ACTIVE):
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
        if await channels.deliver(target, title, body, self.settings.notify_send_seconds):
            log.info(
                "channel message sent",
                extra={"event": "reach.channel_sent", "pending_id": row.pending_id, "target": target.masked},
            )
            return Outcome(repo.SENT)
        return self._retry(row, f"{target.scheme} did not accept the message")


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


def _bundles(facts: dict[str, tuple[list[Any], str, str, str | None]]) -> dict[str, Bundle]:
    out = {}
    for pending_id, (rows, task_id, session_state, current_turn) in facts.items():
        out[pending_id] = Bundle(
            pending_id=pending_id,
            task_id=task_id,
            session_id=rows[0].session_id,
            turn_id=bundle_turn(rows),
            session_state=session_state,
            current_turn_id=current_turn,
            rows=tuple(rows),
        )
    return out
