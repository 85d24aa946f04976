"""No open relay: outbound targets that resolve to this machine or a private network are refused.

A push endpoint or a channel URL comes from a user; the server fetches it. Unless its host is listed
in `TURNWISE_OUTBOUND_ALLOWED_HOSTS` (a bare host, which allows every port, or `host:port`, which
allows that port; `[::1]:8080` for an IPv6 address; exact names, no wildcards but a lone `*`), every
address its name resolves to must be a public one: not loopback, private, link-local, shared
(CGNAT), multicast, reserved or unspecified. Checked when the target is registered and again
immediately before each send (a name may resolve differently later).

What this cannot close: the HTTP client (or Apprise's) resolves the name again when it connects, a
few milliseconds after the check, so a name whose DNS answers change from one query to the next
(DNS rebinding with a zero TTL) could still slip through in that window. Redirects are never
followed, so a target cannot send the request on elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

from backend.domain.errors import InvalidInput


class OutboundRefused(InvalidInput):
    """The target would reach this machine or a private network."""


def _names(host: str, port: int | None) -> set[str]:
    """How an allow-list entry may name this target: the bare host, and with the port."""
    bare = host.lower().strip().strip("[]").rstrip(".")
    names = {bare}
    if ":" in bare:  # an IPv6 address: also bracketed
        names.add(f"[{bare}]")
    if port is not None:
        names.update(f"{n}:{port}" for n in list(names) if n.startswith("[") or ":" not in n)
    return names


def listed(host: str, port: int | None, allowed: Iterable[str]) -> bool:
    """Whether `TURNWISE_OUTBOUND_ALLOWED_HOSTS` (`allowed`) lets this host (and port) through."""
    names = _names(host, port)
    for entry in allowed:
        entry = entry.strip().lower()
        if entry == "*" or entry in names:
            return True
    return False


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or (isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("100.64.0.0/10"))
    )


async def check_target(field: str, host: str | None, port: int | None, allowed: Iterable[str]) -> None:
    """Raise OutboundRefused (an InvalidInput naming `field`) unless the target may be reached."""
    if not host:
        raise OutboundRefused(field, "names no host")
    if listed(host, port, allowed):
        return
    bare = host.strip("[]")
    try:
        addresses = [str(ipaddress.ip_address(bare))]
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(bare, port or 443, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise OutboundRefused(field, f"host {host!r} does not resolve ({exc.strerror or exc})") from None
        addresses = sorted({str(info[4][0]) for info in infos})
    private = [a for a in addresses if not _public(a)]
    if private:
        raise OutboundRefused(
            field,
            f"host {host!r} resolves to a loopback, private or link-local address ({private[0]}); "
            "list it in TURNWISE_OUTBOUND_ALLOWED_HOSTS to allow it",
        )
