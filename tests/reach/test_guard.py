"""No open relay: what a channel URL or a push endpoint may name. Every Apprise URL's target host, as
Apprise parsed it, is checked, unless it is a hosted service at its vendor's fixed public address;
a URL whose target cannot be told, or that would follow redirects or look up a second server on its
own, is refused; `TURNWISE_OUTBOUND_ALLOWED_HOSTS` takes bare hosts and `host:port` entries.

Nothing here leaves this machine: the refused targets are refused before any connection, and the
hosted ones are only parsed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from backend.db.engine import Database
from backend.domain.errors import InvalidInput
from backend.logs import FORMAT, FieldsFormatter
from backend.outbound import channels
from backend.outbound.guard import OutboundRefused, check_target, listed
from backend.services.reach import Reach
from tests.reach.receivers import Browser, webhook
from tests.services.support import services_for

PRIVATE = "TURNWISE_OUTBOUND_ALLOWED_HOSTS"


async def checked(url: str, allowed: tuple[str, ...] = ()) -> channels.ChannelTarget:
    """What adding (or sending to) a channel does with its URL."""
    target = await asyncio.to_thread(channels.inspect, url)
    if target.host is not None:
        await check_target("url", target.host, target.port, allowed)
    return target


@pytest.mark.parametrize(
    "url",
    [
        # Schemes that name their own host, beyond the webhooks: each went through unchecked before.
        "hassio://127.0.0.1/accesstoken",
        "kodi://10.0.0.5",
        "rsyslog://127.0.0.1",
        "bark://127.0.0.1/dev",
        "signal://127.0.0.1:8080/12345678901/12345678902",
        "gotify://192.168.1.2/token",
        "mmost://172.16.0.9/abcdefghij",
        "apprise://[::1]/abc",
        "ntfy://127.0.0.1/topic",
        "ntfy://169.254.169.254/topic",
        # Mail goes to its SMTP server, which the URL may name apart from the address.
        "mailtos://user:pass@example.com?smtp=127.0.0.1",
        "mailto://user:pass@localhost",
    ],
)
async def test_a_target_on_this_machine_or_a_private_network_is_refused(url: str) -> None:
    with pytest.raises(OutboundRefused) as refused:
        await checked(url)
    assert refused.value.field == "url"
    assert PRIVATE in str(refused.value)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("syslog://", "names no host"),  # this machine's own syslog
        ("json://127.0.0.1/hook?redirect=yes", "redirect"),
        ("tgram://123456789:abcdefg_hijklmnop/12315544/?redirect=yes", "redirect"),
        ("matrixs://user:pass@matrix.example.org/#room", "discovery"),
        ("mailtos://user:pass@example.com?wkd=yes&to=dana@example.com", "WKD"),
        ("carrier-pigeon://coop/1", "not an Apprise URL"),
        ("slak://TokenA/TokenB/SECRETTOKENC", "not an Apprise URL this server can send to (slak://***:"),
        # A service it sends to, but a part is missing: said so, with the form that service takes.
        ("slack://TokenA/TokenB", "is a slack:// URL, but incomplete or malformed; Slack takes slack://{"),
    ],
)
async def test_a_url_whose_target_cannot_be_checked_is_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        await checked(url, allowed=("*",))  # even where every host is allowed
    assert refused.value.field == "url"
    assert why in str(refused.value)


async def test_no_line_of_any_logger_shows_a_channel_url_s_secrets_while_it_is_read_or_sent_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.handler.setFormatter(FieldsFormatter(FORMAT))
    token = "Mm0stT0kenSecret42"  # Mattermost's webhook path holds it; its masked form does not
    with caplog.at_level(logging.DEBUG), webhook() as hook:
        hook.script.status = 500
        for url in ("slak://TokenA/TokenB/SECRETTOKENC", "slack://TokenA/TokenB"):
            with pytest.raises(InvalidInput):
                await checked(url)
        target = await checked(f"mmost://{hook.address}/{token}", allowed=("127.0.0.1",))
        assert not await channels.deliver(target, "title", "body", 10)
    for secret in ("TokenA", "TokenB", "SECRETTOKENC", token):
        assert secret not in caplog.text
    # What is not secret stays: the request line at debug, and why the service refused the message,
    # which an operator needs, at WARNING; a refused URL is the caller's to report, not Apprise's.
    assert "POST /hooks/*** HTTP/1.1" in caplog.text
    (refusal,) = [r for r in caplog.records if r.name == "apprise"]
    assert refusal.levelno == logging.WARNING
    assert "error=500" in refusal.getMessage()


@pytest.mark.parametrize(
    "url",
    [
        "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ",
        "discord://4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js",
        "tgram://123456789:abcdefg_hijklmnop/12315544/",
        "pover://u7ey3jhpt2bpo3jpyd7s9bacm77x8j@at2u4rab8zonhm1pdk8rbtwx1uwkn7",
        "ntfys://turnwise-releases",
    ],
)
async def test_a_hosted_service_names_no_host_of_its_own_and_is_taken(url: str) -> None:
    target = await checked(url)
    assert target.host is None
    assert target.plugin is not None


async def test_an_allowed_host_is_checked_by_what_apprise_parsed() -> None:
    target = await checked("hassio://127.0.0.1/accesstoken", allowed=("127.0.0.1:8123",))
    assert (target.host, target.port) == ("127.0.0.1", 8123)  # Home Assistant's own port
    with pytest.raises(OutboundRefused):
        await checked("hassio://127.0.0.1/accesstoken", allowed=("127.0.0.1:9000",))
    assert (await checked("json://127.0.0.1:9000/hook", allowed=("127.0.0.1",))).host == "127.0.0.1"
    assert (await checked("xml://10.0.0.5:9000/hook", allowed=("10.0.0.5:9000",))).port == 9000
    with pytest.raises(OutboundRefused):
        await checked("xml://10.0.0.5:9001/hook", allowed=("10.0.0.5:9000",))


def test_an_allow_list_entry_is_a_bare_host_or_host_and_port() -> None:
    assert listed("127.0.0.1", 8080, ["127.0.0.1"])
    assert listed("127.0.0.1", 8080, ["127.0.0.1:8080"])
    assert not listed("127.0.0.1", 8081, ["127.0.0.1:8080"])
    assert not listed("127.0.0.1", None, ["127.0.0.1:8080"])
    assert listed("::1", 8080, ["[::1]:8080"])
    assert listed("[::1]", 8080, ["::1"])
    assert listed("Push.Example.", 443, [" push.example:443 "])
    assert listed("anything", None, ["*"])
    assert not listed("127.0.0.2", 80, ["127.0.0.1", "127.0.0.1:80"])


@pytest.fixture
async def reach(db: Database) -> AsyncIterator[Reach]:
    async with services_for(db, outbound_allowed_hosts=("127.0.0.1:8443", "10.0.0.5")) as services:
        yield services.reach


async def test_a_push_endpoint_over_http_is_taken_only_from_an_allowed_host_and_port(reach: Reach) -> None:
    browser = Browser()

    async def register(endpoint: str) -> None:
        await reach.register_push("bootstrap", endpoint, browser.p256dh, browser.auth_secret)

    await register("http://127.0.0.1:8443/push/1")  # listed with its port
    await register("http://10.0.0.5:9000/push/2")  # listed as a bare host: any port
    await register("https://127.0.0.1:8443/push/3")
    for endpoint in ("http://127.0.0.1:8444/push/4", "http://127.0.0.1/push/5"):
        with pytest.raises(InvalidInput, match="must be an https URL"):
            await register(endpoint)
    for endpoint in ("https://127.0.0.1:8444/push/6", "https://127.0.0.1/push/7", "https://[::1]/push/8"):
        with pytest.raises(OutboundRefused, match=PRIVATE):
            await register(endpoint)
