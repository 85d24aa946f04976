"""Chat and mail channels through Apprise (`slack://`, `discord://`, `tgram://`, `ntfys://`,
`mailtos://`, `json://`, ...): one Apprise URL per channel, a secret of its user.

Apprise is synchronous (it speaks HTTP through `requests`, SMTP through `smtplib`), so a send runs in
a worker thread under a deadline.

A channel URL (a webhook token, a password) never reaches the log, from Apprise's logger or any
other; what is shown or logged of a channel is Apprise's privacy form, with the secrets masked:

* while a URL is read, Apprise's own records are dropped: they print the URL whole, and a refused URL
  is the caller's mistake, reported to it and logged once by the API as one INFO line;
* Apprise's logger stays at WARNING (its debug lines print URLs), and what it logs of a send (why a
  service refused a message, which an operator needs) has every URL in it masked past its scheme;
* while a URL is read or sent through, no line of any logger (`urllib3`'s request lines at debug
  included) shows a part of it that its privacy form hides (`backend.logs.withholding`).

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
import contextlib
import logging
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import unquote

from backend import logs
from backend.domain.errors import InvalidInput

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

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)\S*")
# What separates the parts of a URL that can be secrets (tokens, a password, a query value).
_SEPARATORS = re.compile(r"[/:@?&=#,;\s]+")
# Shorter parts are withheld from no line: they would mask common text, and hide nothing.
_SHORTEST_SECRET = 3
_reading: ContextVar[bool] = ContextVar("reading_channel_url", default=False)


class _ApprisesRecords(logging.Filter):
    """Apprise's records: none while a URL is read, every URL masked past its scheme in the rest."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _reading.get():
            return False
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # arguments its message cannot take: say so, not fail
            message = f"(an Apprise message that could not be formatted: {record.msg!r})"
        record.msg, record.args = _URL.sub(r"\1***", message), None
        return True


_apprise_log = logging.getLogger("apprise")
_apprise_log.setLevel(logging.WARNING)
_apprise_log.addFilter(_ApprisesRecords())


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
    # The parts of the URL its masked form hides: no log line shows them while a message is sent.
    secrets: frozenset[str] = field(default=frozenset(), compare=False, repr=False)


def _refuse(why: str) -> InvalidInput:
    return InvalidInput("url", why)


def _parts(*urls: str) -> set[str]:
    """The parts of `urls` past their schemes, as written and %-decoded (Apprise logs either)."""
    found: set[str] = set()
    for url in urls:
        rest = url.partition("://")[2] or url
        for text in (rest, unquote(rest)):
            found.update(p for p in _SEPARATORS.split(text) if len(p) >= _SHORTEST_SECRET)
    return found


@contextlib.contextmanager
def _reading_url(url: str) -> Iterator[None]:
    reading = _reading.set(True)
    try:
        with logs.withholding(_parts(url)):
            yield
    finally:
        _reading.reset(reading)


def _unreadable(scheme: str) -> InvalidInput:
    """Why Apprise could not read a URL, in words a person can act on (the URL itself not repeated)."""
    manager = _apprise().NotificationManager()
    if not scheme or scheme not in manager:
        named = f"{scheme}://***: no service has this scheme" if scheme else "it has no scheme://"
        return _refuse(f"is not an Apprise URL this server can send to ({named})")
    service = manager[scheme]
    name = getattr(service, "service_name", None) or scheme
    if not getattr(service, "enabled", True):
        return _refuse(
            f"is a {scheme}:// URL, but this server cannot send to {name} (Apprise's plugin is off)"
        )
    forms = [str(t).replace("{schema}", scheme) for t in getattr(service, "templates", ())[:1]]
    expected = f"; {name} takes {forms[0]}" if forms else ""
    guide = getattr(service, "setup_url", None)
    return _refuse(
        f"is a {scheme}:// URL, but incomplete or malformed{expected}" + (f" (see {guide})" if guide else "")
    )


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
    found = _SCHEME.match(url)
    scheme = found.group(1).lower() if found else ""
    with _reading_url(url):
        plugin = _apprise().Apprise.instantiate(url, asset=_asset())
        if plugin is None:
            raise _unreadable(scheme)
        masked = str(plugin.url(privacy=True))
        secrets = frozenset(_parts(url, str(plugin.url(privacy=False))) - _parts(masked))
    if getattr(plugin, "redirects", False):
        raise _refuse("must not ask to follow HTTP redirects (redirect=yes): they could lead anywhere")
    if scheme in HOSTED_SCHEMES or (scheme in NTFY_SCHEMES and not _host_of(plugin)):
        return ChannelTarget(scheme, masked, None, None, plugin, secrets)
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
    return ChannelTarget(scheme, masked, host, port if isinstance(port, int) else None, plugin, secrets)


def _notify(target: ChannelTarget, title: str, body: str) -> bool:
    # In the worker thread: what Apprise and `requests` log while sending runs in its context.
    with logs.withholding(target.secrets):
        sender = _apprise().Apprise(asset=_asset())
        if not sender.add(target.plugin):
            return False
        return bool(sender.notify(title=title, body=body))


async def deliver(target: ChannelTarget, title: str, body: str, seconds: float) -> bool:
    """Send one message through the inspected (and checked) plugin; whether the service accepted it
    (False: retry later)."""
    return await asyncio.wait_for(asyncio.to_thread(_notify, target, title, body), seconds)
