"""The reach surface: Web Push configuration and subscriptions, chat and mail channels.

Destinations belong to the person who registers them: every call acts on the caller's own, and an
agent token has none. A channel URL is a secret: it is shown back only masked.
"""

from __future__ import annotations

import datetime as dt

import strawberry
from strawberry.types import Info

from backend.api.access import require_person
from backend.api.context import Context


@strawberry.type(description="The server's VAPID key, for PushManager.subscribe(applicationServerKey).")
class PushConfig:
    vapid_public_key: str = strawberry.field(description="URL-safe base64 of the uncompressed P-256 point.")


@strawberry.type(description="A chat or mail channel of the caller's (an Apprise URL).")
class NotificationChannel:
    id: strawberry.ID
    label: str
    target: str = strawberry.field(description="The channel's URL with its secrets masked.")
    created_at: dt.datetime


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
