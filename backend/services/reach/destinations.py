"""Where a person is told: push subscriptions, chat and mail channels, and the VAPID key pushes use."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from backend.domain.errors import InvalidInput
from backend.outbound import channels, webpush
from backend.outbound.guard import check_target, listed
from backend.repository import meta
from backend.repository import reach as repo
from backend.services.reach.base import Part

log = logging.getLogger("turnwise.reach")
VAPID_KEY = "vapid_private_key"
MAX_LABEL = 200


@dataclass(frozen=True)
class ChannelView:
    id: str
    label: str
    target: str  # the URL with its secrets masked
    created_at: dt.datetime


def port_of(parts: SplitResult) -> int:
    """The port an http(s) URL connects to."""
    return parts.port or (443 if parts.scheme == "https" else 80)


class Destinations(Part):
    """A person's own push subscriptions and channels, each checked before it is kept."""

    keys: webpush.VapidKeys | None

    async def load_keys(self) -> webpush.VapidKeys:
        """The VAPID key pair: TURNWISE_VAPID_PRIVATE_KEY, or the one kept in the database (made on
        the first start; processes starting together agree on one)."""
        if self.keys is None:
            configured = self.settings.vapid_private_key
            if configured:
                self.keys = webpush.VapidKeys.load(configured.get_secret_value())
            else:
                candidate = webpush.VapidKeys.generate().private_text()
                async with self.deps.db.write() as conn:
                    stored = await meta.value_or_set(conn, VAPID_KEY, candidate)
                self.keys = webpush.VapidKeys.load(stored)
        return self.keys

    async def _guard(self, field_name: str, url: str) -> None:
        parts = urlsplit(url)
        await check_target(field_name, parts.hostname, port_of(parts), self.settings.outbound_allowed_hosts)

    async def register_push(self, user_id: str, endpoint: str, p256dh: str, auth: str) -> None:
        parts = urlsplit(endpoint)
        try:
            port = port_of(parts)
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
