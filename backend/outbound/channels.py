"""Chat and mail channels through Apprise (`slack://`, `discord://`, `tgram://`, `ntfys://`,
`mailtos://`, `json://`, ...): one Apprise URL per channel, a secret of its user.

Apprise is synchronous (it speaks HTTP through `requests`, SMTP through `smtplib`), so a send runs in
a worker thread under a deadline. Its own logger is kept at WARNING: its debug lines would show the
URLs, and a channel URL (a webhook token, a password) never reaches the log; what is shown or logged
of a channel is Apprise's privacy form, with the secrets masked.

Where a message goes is decided here, refusing by default (no open relay, see `guard.py`):

* a **hosted service** (`HOSTED_SCHEMES`: Slack, Discord, Telegram, Pushover, ... and ntfy without a
  host of its own) always talks to its vendor's fixed public API: its URL names no host to check;
* **every other scheme** must name the host it talks to, as Apprise itself parsed it (the plugin's
  `host`; for mail its SMTP server, `smtp_host`); the caller checks that host (`guard.check_target`)
  when the channel is added and again before each send. A URL from which no host can be told is
  refused, and so is one whose plugin would look up a second address on its own (Matrix server
  discovery, e-mail Web Key Directory lookups): that address would escape the check;
* **redirects are never followed**: the sending Apprise asset turns them off, and a URL asking for
  them (`redirect=yes`) is refused, so a public webhook cannot answer 307 towards this machine.

What is checked is what is sent: `inspect` returns the plugin instance, and `deliver` sends through
that very instance.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from backend.domain.errors import InvalidInput

logging.getLogger("apprise").setLevel(logging.WARNING)

MAX_URL = 2_000
# Services whose plugin always sends to the vendor's own public API, whatever the URL says (what
# looks like a host in `slack://TokenA/...` is a token). Each was read in Apprise's plugin: no
# address of the URL's is ever contacted.
HOSTED_SCHEMES = frozenset(
    {
        "slack", "discord", "tgram", "pover", "pbul", "gchat", "sendgrid", "join", "line", "ifttt",
        "prowl", "spush", "simplepush", "pushed", "psafer", "psafers", "wxteams", "webex",
    }
)  # fmt: skip
# ntfy is hosted (ntfy.sh) when its URL names only a topic (`ntfys://topic`, Apprise's cloud mode);
# `ntfy://host/topic` goes to that host, which is checked.
NTFY_SCHEMES = frozenset({"ntfy", "ntfys"})


@cache
def _apprise() -> Any:
    import apprise  # loads every plugin once (about half a second)

    return apprise


@cache
def _asset() -> Any:
    """The asset every channel is parsed and sent with: HTTP redirects are not followed."""
    return _apprise().AppriseAsset(http_redirects=False)


@dataclass(frozen=True)
class ChannelTarget:
    scheme: str
    masked: str  # the URL with its secrets masked: what a user is shown and the log names
    host: str | None  # the host the message goes to; None for a hosted service (its vendor's API)
    port: int | None
    plugin: Any = field(default=None, compare=False, repr=False)  # what `deliver` sends through


def _refuse(why: str) -> InvalidInput:
    return InvalidInput("url", why)


def _host_of(plugin: Any) -> str | None:
    """The host Apprise parsed as the one this plugin talks to (mail: its SMTP server)."""
    for name in ("smtp_host", "host"):
        value = getattr(plugin, name, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def inspect(url: str) -> ChannelTarget:
    """The channel a URL describes, or InvalidInput("url") when this server does not send to it."""
    url = url.strip()
    if not url or len(url) > MAX_URL:
        raise _refuse(f"must be an Apprise URL of 1-{MAX_URL} characters")
    scheme = urlsplit(url).scheme.lower()
    plugin = _apprise().Apprise.instantiate(url, asset=_asset())
    if plugin is None:
        raise _refuse(f"is not an Apprise URL this server can send to (scheme {scheme!r})")
    masked = str(plugin.url(privacy=True))
    if getattr(plugin, "redirects", False):
        raise _refuse("must not ask to follow HTTP redirects (redirect=yes): they could lead anywhere")
    if scheme in HOSTED_SCHEMES or (scheme in NTFY_SCHEMES and not _host_of(plugin)):
        return ChannelTarget(scheme, masked, None, None, plugin)
    if getattr(plugin, "discovery", False) or getattr(plugin, "use_wkd", False):
        raise _refuse(
            f"{scheme}:// would look up a second server on its own (server discovery, WKD), "
            "which this server cannot check; turn it off in the URL (discovery=no, wkd=no)"
        )
    host = _host_of(plugin)
    if host is None:
        raise _refuse(
            f"{scheme}:// names no host this server can check before sending, and is not a hosted "
            "service it knows; use a URL that names its host"
        )
    port = getattr(plugin, "port", None)
    return ChannelTarget(scheme, masked, host, port if isinstance(port, int) else None, plugin)


def _notify(plugin: Any, title: str, body: str) -> bool:
    sender = _apprise().Apprise(asset=_asset())
    if not sender.add(plugin):
        return False
    return bool(sender.notify(title=title, body=body))


async def deliver(target: ChannelTarget, title: str, body: str, seconds: float) -> bool:
    """Send one message through the inspected (and checked) plugin; whether the service accepted it
    (False: retry later)."""
    return await asyncio.wait_for(asyncio.to_thread(_notify, target.plugin, title, body), seconds)
