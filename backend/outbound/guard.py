"""No open relay: outbound targets that resolve to this machine or a private network are refused.

A push endpoint or a channel URL comes from a user; the server fetches it. Unless its host is listed
in `TURNWISE_OUTBOUND_ALLOWED_HOSTS` (host or host:port, exact), every address its name resolves to
must be a public one: not loopback, private, link-local, shared (CGNAT), multicast, reserved or
unspecified. Checked when the target is registered and again before each send (a name may resolve
differently later).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

from backend.domain.errors import InvalidInput


class OutboundRefused(InvalidInput):
    """The target would reach this machine or a private network."""


def _listed(host: str, port: int | None, allowed: Iterable[str]) -> bool:
    names = {host.lower().strip("[]")}
    if port is not None:
        names.add(f"{host.lower()}:{port}")
    return any(a.lower().strip() in names or a.strip() == "*" for a in allowed)


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
    if _listed(host, port, allowed):
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
