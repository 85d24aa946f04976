"""The reach surface: Web Push configuration and subscriptions, chat and mail channels.

Destinations belong to the person who registers them: every call acts on the caller's own, and an
agent token has none. A channel URL is a secret: it is shown back only masked.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import strawberry
from strawberry.types import Info

from backend.api.access import require_person
from backend.api.context import Context
from backend.domain.reminders import Preferences


@strawberry.type(description="The server's VAPID key, for PushManager.subscribe(applicationServerKey).")
class PushConfig:
    vapid_public_key: str = strawberry.field(description="URL-safe base64 of the uncompressed P-256 point.")


@strawberry.type(description="A chat or mail channel of the caller's (an Apprise URL).")
class NotificationChannel:
    id: strawberry.ID
    label: str
    target: str = strawberry.field(description="The channel's URL with its secrets masked.")
    created_at: dt.datetime


@strawberry.type(
    description="When the caller is told of an action that waits for them: first after "
    "notifyAfterSeconds, then again every remindEverySeconds while it waits, and once it has waited "
    "escalateAfterSeconds their channel escalateChannelId (a team chat) is told too, and hears of "
    "nothing else. Null: never (notifyAfterSeconds: the server's delay)."
)
class NotificationPreferences:
    notify_after_seconds: float = strawberry.field(
        description="Seconds from the ask to the first notice: the server's delay "
        "(TURNWISE_NOTIFY_AFTER_SECONDS) unless the caller chose a later one."
    )
    remind_every_seconds: float | None = strawberry.field(
        description="Tell the caller again this often while the action still waits; null: never."
    )
    escalate_after_seconds: float | None = strawberry.field(
        description="Seconds from the ask after which escalateChannelId is told; null: never."
    )
    escalate_channel_id: strawberry.ID | None = strawberry.field(
        description="One of the caller's channels, told only when an action escalates."
    )


def _preferences_view(prefs: Preferences, server_delay: float) -> NotificationPreferences:
    return NotificationPreferences(
        notify_after_seconds=prefs.first_notice(server_delay),
        remind_every_seconds=prefs.remind_every,
        escalate_after_seconds=prefs.escalate_after,
        escalate_channel_id=None
        if prefs.escalate_channel_id is None
        else strawberry.ID(prefs.escalate_channel_id),
    )


_LEAVE = "Omitted: left as it is; null: back to the default ("


def _person(info: Info[Context, None]) -> str:
    principal = info.context.principal
    require_person(principal, "notification destinations")
    return principal.user_id


@strawberry.type
class ReachQueries:
    @strawberry.field(description="What the web app subscribes to Web Push with.")
    async def push_config(self, info: Info[Context, None]) -> PushConfig:
        _person(info)
        keys = await info.context.services.reach.load_keys()
        return PushConfig(vapid_public_key=keys.public_key)

    @strawberry.field(description="The caller's own chat and mail channels, secrets masked.")
    async def notification_channels(self, info: Info[Context, None]) -> list[NotificationChannel]:
        found = await info.context.services.reach.channels(_person(info))
        return [
            NotificationChannel(
                id=strawberry.ID(c.id), label=c.label, target=c.target, created_at=c.created_at
            )
            for c in found
        ]

    @strawberry.field(description="The caller's reminder and escalation preferences.")
    async def notification_preferences(self, info: Info[Context, None]) -> NotificationPreferences:
        reach = info.context.services.reach
        prefs = await reach.preferences(_person(info))
        return _preferences_view(prefs, float(reach.settings.notify_after_seconds))


@strawberry.type
class ReachMutations:
    @strawberry.mutation(
        description="Register this browser's Web Push subscription (PushSubscription.toJSON()'s endpoint "
        "and keys) for the caller; registering it again updates it."
    )
    async def register_push_subscription(
        self, info: Info[Context, None], endpoint: str, p256dh: str, auth: str
    ) -> bool:
        await info.context.services.reach.register_push(_person(info), endpoint, p256dh, auth)
        return True

    @strawberry.mutation(description="Forget this browser's subscription; false when it was not registered.")
    async def unregister_push_subscription(self, info: Info[Context, None], endpoint: str) -> bool:
        return await info.context.services.reach.unregister_push(_person(info), endpoint)

    @strawberry.mutation(
        description="Add a chat or mail channel: an Apprise URL (slack://, discord://, tgram://, ntfys://, "
        "mailtos://, json://, ...). Hosts on this machine or a private network are refused unless "
        "TURNWISE_OUTBOUND_ALLOWED_HOSTS lists them."
    )
    async def add_notification_channel(
        self, info: Info[Context, None], url: str, label: str | None = None
    ) -> NotificationChannel:
        c = await info.context.services.reach.add_channel(_person(info), url, label)
        return NotificationChannel(
            id=strawberry.ID(c.id), label=c.label, target=c.target, created_at=c.created_at
        )

    @strawberry.mutation(
        description="Remove one of the caller's channels; false when there is no such channel."
    )
    async def remove_notification_channel(self, info: Info[Context, None], channel_id: strawberry.ID) -> bool:
        return await info.context.services.reach.remove_channel(_person(info), str(channel_id))

    @strawberry.mutation(
        description="Change the caller's reminder and escalation preferences; only the arguments given "
        "change. Each is a number of seconds, at least the server's delay "
        "(TURNWISE_NOTIFY_AFTER_SECONDS) and at most 30 days; an escalation needs both its time (at "
        "least the first notice's) and one of the caller's channels. On a bad value nothing changes "
        "and the error names the argument."
    )
    async def set_notification_preferences(
        self,
        info: Info[Context, None],
        notify_after_seconds: Annotated[
            float | None, strawberry.argument(description=_LEAVE + "the server's delay).")
        ] = strawberry.UNSET,
        remind_every_seconds: Annotated[
            float | None, strawberry.argument(description=_LEAVE + "no reminders).")
        ] = strawberry.UNSET,
        escalate_after_seconds: Annotated[
            float | None, strawberry.argument(description=_LEAVE + "no escalation).")
        ] = strawberry.UNSET,
        escalate_channel_id: Annotated[
            strawberry.ID | None, strawberry.argument(description=_LEAVE + "no escalation).")
        ] = strawberry.UNSET,
    ) -> NotificationPreferences:
        given: dict[str, Any] = {
            "notify_after": notify_after_seconds,
            "remind_every": remind_every_seconds,
            "escalate_after": escalate_after_seconds,
            "escalate_channel_id": escalate_channel_id,
        }
        changes = {name: value for name, value in given.items() if value is not strawberry.UNSET}
        reach = info.context.services.reach
        prefs = await reach.set_preferences(_person(info), changes)
        return _preferences_view(prefs, float(reach.settings.notify_after_seconds))
