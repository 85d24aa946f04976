"""A person's reminder and escalation preferences, their bounds, and what a reminder or escalation says.

Pure. A person is told of a pending action once, `notify_after` seconds after the ask (the server's
delay unless they chose a later one); with `remind_every` they are told again every so many seconds
while it waits; with `escalate_after` and `escalate_channel_id`, that one channel of theirs (a team
chat) is told once the action has waited that long, and hears of nothing else. No preference is
today's behaviour: one notice, no reminder, no escalation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from backend.domain.errors import InvalidInput

MAX_SECONDS = 30 * 24 * 3600.0  # a month: longer than any action is expected to wait


@dataclass(frozen=True, slots=True)
class Preferences:
    """What a person chose; None is the default (the server's delay; never; never)."""

    notify_after: float | None = None
    remind_every: float | None = None
    escalate_after: float | None = None
    escalate_channel_id: str | None = None

    def first_notice(self, server_delay: float) -> float:
        """Seconds from the ask to the person's first notice: never sooner than the server's delay."""
        return max(server_delay, self.notify_after or 0.0)

    @property
    def escalates(self) -> bool:
        return self.escalate_after is not None and self.escalate_channel_id is not None


def _bounded(field: str, value: float | None, low: float, low_says: str) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(field, "must be a positive number of seconds")
    if value < low:
        raise InvalidInput(field, f"must be at least {low:g} seconds ({low_says})")
    if value > MAX_SECONDS:
        raise InvalidInput(field, f"must be at most {MAX_SECONDS:g} seconds (30 days)")


def validate(prefs: Preferences, *, server_delay: float, own_channels: set[str]) -> None:
    """InvalidInput naming the field (as the API spells it) unless `prefs` can be kept.

    Nobody is told sooner or more often than the server's delay (TURNWISE_NOTIFY_AFTER_SECONDS);
    an escalation comes after the first notice, needs both its time and its channel, and goes to
    one of the person's own channels (`own_channels`)."""
    floor = "the server's TURNWISE_NOTIFY_AFTER_SECONDS"
    _bounded("notifyAfterSeconds", prefs.notify_after, server_delay, floor)
    _bounded("remindEverySeconds", prefs.remind_every, server_delay, floor)
    first = prefs.first_notice(server_delay)
    _bounded("escalateAfterSeconds", prefs.escalate_after, first, "the first notice comes before it")
    if prefs.escalate_after is not None and prefs.escalate_channel_id is None:
        raise InvalidInput("escalateChannelId", "is needed with escalateAfterSeconds: the channel to tell")
    if prefs.escalate_channel_id is not None:
        if prefs.escalate_after is None:
            raise InvalidInput("escalateAfterSeconds", "is needed with escalateChannelId: when to tell it")
        if prefs.escalate_channel_id not in own_channels:
            raise InvalidInput("escalateChannelId", "must be one of your notification channels")


def waited(seconds: float) -> str:
    """How long an action has waited, as a person reads it: "40 s", "12 min", "2 h 5 min", "3 d 4 h"."""
    total = max(1, int(seconds))
    if total < 60:
        return f"{total} s"
    minutes, hours, days = total // 60, total // 3600, total // 86400
    if total < 3600:
        return f"{minutes} min"
    if total < 86400:
        rest = minutes - hours * 60
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    rest = hours - days * 24
    return f"{days} d {rest} h" if rest else f"{days} d"


def reminder_chat(title: str, body: str, how_long: str) -> tuple[str, str]:
    """A chat or mail reminder: the first notice's message, saying it is a reminder and how long."""
    return (
        _retitled(title, "reminder", how_long),
        f"Reminder: still waiting for an answer after {how_long}.\n{body}",
    )


def escalation_chat(title: str, body: str, how_long: str, person: str) -> tuple[str, str]:
    """What an escalation channel is told: the action, how long it waited, whose answer it awaits."""
    return (
        _retitled(title, "escalation", how_long),
        f"Escalation: waiting {how_long} for an answer from {person}; nobody has answered yet.\n{body}",
    )


def reminder_push(title: str, body: str, how_long: str) -> tuple[str, str]:
    return f"Reminder: {title}", f"Waiting {how_long} · {body}"


def _retitled(title: str, what: str, how_long: str) -> str:
    prefix = "Turnwise: "
    rest = title[len(prefix) :] if title.startswith(prefix) else title
    return f"Turnwise {what}: {rest} (waiting {how_long})"
