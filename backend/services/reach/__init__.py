"""Reach: a person hears of a pending action with no tab open (Web Push, chat and mail channels).

Whom to tell is decided from the committed ask: `asked` writes one outbox row per destination of
every user who can see the task, in the ask's own unit of work (one statement; on PostgreSQL a
one-question ask's own statement writes them, `repository.asks.ask_context_inserting`),
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
   `--workers N` exactly one process takes each row), marking them `sending`, and in the same
   transaction writes what follows each (a person's next reminder, their escalation), puts off a
   first notice its person wants later, and skips reminders of actions settled meanwhile
   (`reminders`);
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

Its parts, one concern each: `asking` (an ask's outbox rows and the wake-ups they send),
`destinations` (push subscriptions, channels and the VAPID key), `delivery` (sending a claimed
batch), `closing` (closing the pushes of settled actions), `reminders` (a person's reminder and
escalation preferences, and the claim that decides each due message and writes its follow-ups) and
`worker` (the loop, and `Reach`, the service made of these parts).
"""

from backend.services.reach.asking import WAKE, WAKE_CHANNEL
from backend.services.reach.destinations import ChannelView
from backend.services.reach.worker import Reach

__all__ = ["WAKE", "WAKE_CHANNEL", "ChannelView", "Reach"]
