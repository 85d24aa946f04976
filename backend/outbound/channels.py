"""Chat and mail channels through Apprise (`slack://`, `discord://`, `tgram://`, `ntfys://`,
`mailtos://`, `json://`, ...): one Apprise URL per channel, a secret of its user.

Apprise is synchronous (it speaks HTTP through `requests`, SMTP through `smtplib`), so a send runs in
a worker thread under a deadline. Its own logger is kept at WARNING: its debug lines would show the
URLs, and a channel URL (a webhook token, a password) never reaches the log; what is shown or logged
of a channel is Apprise's privacy form, with the secrets masked.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from backend.domain.errors import InvalidInput

logging.getLogger("apprise").setLevel(logging.WARNING)

MAX_URL = 2_000
# Schemes whose messages go to a host the URL names (self-hosted services, webhooks, SMTP); every
# other scheme talks to its vendor's public API (Slack, Discord, Telegram, ntfy.sh, ...).
OWN_HOST_SCHEMES = frozenset(
    {
        "json", "jsons", "xml", "xmls", "form", "forms", "ntfy", "ntfys", "gotify", "gotifys",
        "apprise", "apprises", "mmost", "mmosts", "rocket", "rockets", "matrix", "matrixs",
        "nctalk", "nctalks", "ncloud", "nclouds", "mailto", "mailtos",
    }
)  # fmt: skip


@cache
def _apprise() -> Any:
    import apprise  # loads every plugin once (about half a second)

    return apprise


@dataclass(frozen=True)
class ChannelTarget:
    scheme: str
    masked: str  # the URL with its secrets masked: what a user is shown and the log names
    host: str | None  # the host the message goes to, when the URL names one (checked by the guard)
    port: int | None


def inspect(url: str) -> ChannelTarget:
    """The channel a URL describes, or InvalidInput("url") when Apprise does not take it."""
    url = url.strip()
    if not url or len(url) > MAX_URL:
        raise InvalidInput("url", f"must be an Apprise URL of 1-{MAX_URL} characters")
    scheme = urlsplit(url).scheme.lower()
    plugin = _apprise().Apprise.instantiate(url)
    if plugin is None:
        raise InvalidInput("url", f"is not an Apprise URL this server can send to (scheme {scheme!r})")
    host: str | None = None
    port: int | None = None
    if scheme in OWN_HOST_SCHEMES:
        host = getattr(plugin, "smtp_host", None) or getattr(plugin, "host", None) or None
        port = getattr(plugin, "port", None)
    return ChannelTarget(scheme, str(plugin.url(privacy=True)), host, port if isinstance(port, int) else None)


def _notify(url: str, title: str, body: str) -> bool:
    apprise = _apprise()
    sender = apprise.Apprise()
    if not sender.add(url):
        return False
    return bool(sender.notify(title=title, body=body))


async def deliver(url: str, title: str, body: str, seconds: float) -> bool:
    """Send one message; whether the service accepted it (False: retry later)."""
    return await asyncio.wait_for(asyncio.to_thread(_notify, url, title, body), seconds)
